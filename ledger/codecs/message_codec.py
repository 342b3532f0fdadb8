"""Each v3 request and response to and from its serialized Request / Response message.

The bytes are the protobuf package's (upb) over globelog's schema of BookKeeper's messages,
ledger/codecs/proto/bookkeeper.proto. What upb leaves to its caller, this module does: it checks
every field BookKeeper requires, every enum value against ledger.codes and every text field's
UTF-8, and turns any malformed message into a ProtocolError that says what arrived and what was
expected. protobuf writes fields in field-number order, as protobuf-java does, so the bytes equal
BookKeeper's for the same message (tests/unit/ledger/test_ledger_frames.py has golden bytes).

Parsing follows proto2 as protobuf-java does: unknown fields (groups included) are skipped, a
field whose wire type does not match the schema counts as unknown, repeated occurrences of an
embedded message are merged, and for a scalar the last occurrence wins.
"""

from __future__ import annotations

from typing import Any, TypeVar, cast

from google.protobuf.message import DecodeError, Message

from ledger.codecs.messages import (
    AddRequest,
    AddResponse,
    AuthRequest,
    AuthResponse,
    ForceLedgerRequest,
    ForceLedgerResponse,
    GetBookieInfoRequest,
    GetBookieInfoResponse,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    StatusOnlyResponse,
    WriteLacRequest,
    WriteLacResponse,
)
from ledger.codecs.proto import bookkeeper_pb2 as pb
from ledger.codes import LAST_ADD_CONFIRMED, OperationType, ProtocolVersion, ReadFlag, StatusCode
from ledger.errors import ProtocolError

M = TypeVar("M", bound=Message)

_RECOVERY_ADD = 1  # AddRequest.flag
_SHOWN_BYTES = 16  # of a message that does not parse, in its error
_VERSION_THREE = int(ProtocolVersion.VERSION_THREE)
# The Request / Response field that carries each operation's body (the same number in both).
_REQUEST_BODIES = {
    OperationType.READ_ENTRY: "readRequest",
    OperationType.ADD_ENTRY: "addRequest",
    OperationType.AUTH: "authRequest",
    OperationType.WRITE_LAC: "writeLacRequest",
    OperationType.READ_LAC: "readLacRequest",
    OperationType.GET_BOOKIE_INFO: "getBookieInfoRequest",
    OperationType.FORCE_LEDGER: "forceLedgerRequest",
}
_RESPONSE_BODIES = {
    OperationType.READ_ENTRY: "readResponse",
    OperationType.ADD_ENTRY: "addResponse",
    OperationType.AUTH: "authResponse",
    OperationType.WRITE_LAC: "writeLacResponse",
    OperationType.READ_LAC: "readLacResponse",
    OperationType.GET_BOOKIE_INFO: "getBookieInfoResponse",
    OperationType.FORCE_LEDGER: "forceLedgerResponse",
}
# Each enum by its wire values (a dict lookup, not an enum constructor, on the hot path).
_STATUSES = {int(status): status for status in StatusCode}
_OPERATIONS = {int(operation): operation for operation in OperationType}
_VERSIONS = {int(version): version for version in ProtocolVersion}
_READ_FLAGS = {int(flag): flag for flag in ReadFlag}


# ---------------------------------------------------------------------------------- encoding


def request_message(request: Request) -> pb.Request:
    """The Request message of `request`."""
    message = pb.Request()
    _fill_header(message.header, request)
    match request:
        case AddRequest():
            _fill_add(message.addRequest, request)
        case ReadRequest():
            _check_read(request)
            read = message.readRequest
            read.ledgerId = request.ledger_id
            read.entryId = request.entry_id
            if request.master_key is not None:
                read.masterKey = request.master_key
            if request.previous_lac is not None:
                read.previousLAC = request.previous_lac
            if request.timeout_ms is not None:
                read.timeOut = request.timeout_ms
            if request.flag is not None:
                read.flag = request.flag
        case WriteLacRequest():
            lac = message.writeLacRequest
            lac.ledgerId = request.ledger_id
            lac.lac = request.lac
            lac.masterKey = request.master_key
            lac.body = request.body
        case ReadLacRequest():
            message.readLacRequest.ledgerId = request.ledger_id
        case ForceLedgerRequest():
            message.forceLedgerRequest.ledgerId = request.ledger_id
        case GetBookieInfoRequest():
            message.getBookieInfoRequest.requested = request.requested
        case AuthRequest():
            message.authRequest.authPluginName = request.plugin_name.encode()
            message.authRequest.payload = request.payload
    return message


def add_request_parts(request: AddRequest) -> tuple[pb.Request, bytes]:
    """An AddRequest's Request in two parts whose serializations, joined, are the whole one's
    (fields are written in field-number order): a Request holding only the header, to
    serialize per txn id, and the serialized Request holding only the addRequest (the entry)."""
    header = pb.Request()
    _fill_header(header.header, request)
    add = pb.Request()
    _fill_add(add.addRequest, request)
    return header, add.SerializeToString()


def _fill_header(header: pb.BKPacketHeader, request: Request) -> None:
    header.version = _VERSION_THREE
    header.operation = request.operation
    header.txnId = request.txn_id
    if request.priority:
        header.priority = request.priority


def _fill_add(add: pb.AddRequest, request: AddRequest) -> None:
    add.ledgerId = request.ledger_id
    add.entryId = request.entry_id
    add.masterKey = request.master_key
    add.body = request.body
    if request.write_flags is not None:
        add.writeFlags = request.write_flags
    if request.recovery:
        add.flag = _RECOVERY_ADD


def encode_start_tls_message(txn_id: int) -> bytes:
    """The serialized START_TLS Request: a v3 header and an empty, present startTLSRequest
    (a bookie refuses one without it)."""
    message = pb.Request()
    message.header.version = _VERSION_THREE
    message.header.operation = OperationType.START_TLS
    message.header.txnId = txn_id
    message.startTLSRequest.SetInParent()
    return message.SerializeToString()


def decode_start_tls_message(data: bytes | bytearray | memoryview, txn_id: int) -> StatusCode:
    """The status of a bookie's answer to START_TLS `txn_id`; ProtocolError if it is another
    answer or malformed."""
    message = parse_message(pb.Response(), data, "Response")
    op, txn, _ = _header(message, "Response")
    what = f"Response {op.name} txn {txn}"
    if op is not OperationType.START_TLS or txn != txn_id:
        raise ProtocolError(f"{what}: expected the answer to START_TLS txn {txn_id}")
    return _status(message, what)


def encode_request_message(request: Request) -> bytes:
    """The serialized Request message for `request` (without the frame length)."""
    return request_message(request).SerializeToString()


def encode_response_message(response: Response) -> bytes:
    """The serialized Response message for `response` (for fake bookies and tests); the
    top-level status repeats the body's, as bookies do."""
    message = pb.Response()
    header = message.header
    header.version = _VERSION_THREE
    header.operation = response.operation
    header.txnId = response.txn_id
    message.status = response.status
    match response:
        case StatusOnlyResponse():
            assert response.status is not StatusCode.EOK, "an EOK response needs its body"
        case AddResponse():
            add = message.addResponse
            add.status, add.ledgerId, add.entryId = (
                response.status,
                response.ledger_id,
                response.entry_id,
            )
        case ReadResponse():
            read = message.readResponse
            read.status, read.ledgerId, read.entryId = (
                response.status,
                response.ledger_id,
                response.entry_id,
            )
            if response.body is not None:
                read.body = response.body
            if response.max_lac is not None:
                read.maxLAC = response.max_lac
            if response.lac_update_timestamp is not None:
                read.lacUpdateTimestamp = response.lac_update_timestamp
        case WriteLacResponse():
            message.writeLacResponse.status = response.status
            message.writeLacResponse.ledgerId = response.ledger_id
        case ForceLedgerResponse():
            message.forceLedgerResponse.status = response.status
            message.forceLedgerResponse.ledgerId = response.ledger_id
        case ReadLacResponse():
            lac = message.readLacResponse
            lac.status, lac.ledgerId = response.status, response.ledger_id
            if response.lac_body is not None:
                lac.lacBody = response.lac_body
            if response.last_entry_body is not None:
                lac.lastEntryBody = response.last_entry_body
        case GetBookieInfoResponse():
            info = message.getBookieInfoResponse
            info.status = response.status
            if response.total_disk_capacity is not None:
                info.totalDiskCapacity = response.total_disk_capacity
            if response.free_disk_space is not None:
                info.freeDiskSpace = response.free_disk_space
        case AuthResponse():
            # AuthMessage has no status field: the status travels only at the top level.
            message.authResponse.authPluginName = response.plugin_name.encode()
            message.authResponse.payload = response.payload
    return message.SerializeToString()


def _check_read(request: ReadRequest) -> None:
    """The combinations a bookie (and BookKeeper's client) refuses are programming errors."""
    if request.flag is None and request.timeout_ms is None:
        return  # a plain read (the usual one) has nothing to check
    if request.flag is ReadFlag.FENCE_LEDGER:
        assert request.master_key is not None, "a fencing read needs the master key"
    long_poll = request.flag is ReadFlag.ENTRY_PIGGYBACK or request.timeout_ms is not None
    if long_poll:
        assert request.previous_lac is not None, "a long-poll read needs previous_lac"
    if request.flag is ReadFlag.ENTRY_PIGGYBACK:
        assert request.entry_id == LAST_ADD_CONFIRMED, "a long-poll read names entry -1"


# ---------------------------------------------------------------------------------- decoding


def parse_message(message: M, data: bytes | bytearray | memoryview, what: str) -> M:
    """`message` filled from `data`; ProtocolError if the bytes are not a protobuf message."""
    try:
        message.ParseFromString(cast(bytes, data))  # upb takes any buffer
    except DecodeError as err:
        start = bytes(data[:_SHOWN_BYTES]).hex()
        raise ProtocolError(
            f"{what}: {len(data)} bytes that do not parse as a {message.DESCRIPTOR.name} "
            f"message, from {start}{'...' if len(data) > _SHOWN_BYTES else ''} ({err})"
        ) from None
    return message


def required(message: Message, name: str, what: str) -> Any:
    """The value of the field `name`, which BookKeeper's schema requires; ProtocolError naming
    the field if it is absent."""
    if not message.HasField(name):
        number = message.DESCRIPTOR.fields_by_name[name].number
        raise ProtocolError(f"{what}: required field {name} ({number}) is missing")
    return getattr(message, name)


def optional(message: Message, name: str) -> Any:
    """The value of the field `name`, or None when absent."""
    return getattr(message, name) if message.HasField(name) else None


def known(table: dict[int, Any], value: int, name: str, enum_name: str, what: str) -> Any:
    """The enum member of wire value `value`; ProtocolError naming the field if none is."""
    member = table.get(value)
    if member is None:
        raise ProtocolError(f"{what}: {name} is {value}, not a known {enum_name}")
    return member


def text(raw: bytes, name: str, what: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ProtocolError(f"{what}: {name} is not valid UTF-8: {err}") from None


def _header(message: pb.Request | pb.Response, what: str) -> tuple[OperationType, int, int]:
    """The operation, txn id and priority of a message's BKPacketHeader."""
    header = message.header
    if (
        message.HasField("header")
        and header.HasField("txnId")
        and header.HasField("version")
        and header.version in _VERSIONS
    ):
        operation = _OPERATIONS.get(header.operation)
        if operation is not None:
            return operation, header.txnId, header.priority
    # Something is wrong: find it, and say it.
    header = required(message, "header", what)
    where = f"{what} header"
    known(_VERSIONS, required(header, "version", where), "version", "ProtocolVersion", where)
    operation = required(header, "operation", where)
    return (
        known(_OPERATIONS, operation, "operation", "OperationType", where),
        required(header, "txnId", where),
        header.priority,
    )


def _status(message: Message, what: str) -> StatusCode:
    status: StatusCode = known(
        _STATUSES, required(message, "status", what), "status", "StatusCode", what
    )
    return status


def decode_request_message(data: bytes | bytearray | memoryview) -> Request:
    """The request in a serialized Request message; ProtocolError if malformed or unsupported
    (for fake bookies and tests)."""
    message = parse_message(pb.Request(), data, "Request")
    op, txn, priority = _header(message, "Request")
    what = f"Request {op.name} txn {txn}"
    name = _REQUEST_BODIES.get(op)
    if name is None:
        raise ProtocolError(f"{what}: operation {op.name} is not supported")
    body = required(message, name, what)
    where = f"{what} body"
    match op:
        case OperationType.ADD_ENTRY:
            flag = optional(body, "flag")
            if flag not in (None, _RECOVERY_ADD):
                raise ProtocolError(f"{where}: unknown AddRequest flag {flag}")
            return AddRequest(
                txn_id=txn,
                ledger_id=required(body, "ledgerId", where),
                entry_id=required(body, "entryId", where),
                master_key=required(body, "masterKey", where),
                body=required(body, "body", where),
                recovery=flag == _RECOVERY_ADD,
                write_flags=optional(body, "writeFlags"),
                priority=priority,
            )
        case OperationType.READ_ENTRY:
            flag = optional(body, "flag")
            return ReadRequest(
                txn_id=txn,
                ledger_id=required(body, "ledgerId", where),
                entry_id=required(body, "entryId", where),
                flag=None if flag is None else known(_READ_FLAGS, flag, "flag", "ReadFlag", where),
                master_key=optional(body, "masterKey"),
                previous_lac=optional(body, "previousLAC"),
                timeout_ms=optional(body, "timeOut"),
                priority=priority,
            )
        case OperationType.WRITE_LAC:
            return WriteLacRequest(
                txn_id=txn,
                ledger_id=required(body, "ledgerId", where),
                lac=required(body, "lac", where),
                master_key=required(body, "masterKey", where),
                body=required(body, "body", where),
                priority=priority,
            )
        case OperationType.READ_LAC:
            return ReadLacRequest(txn, required(body, "ledgerId", where), priority)
        case OperationType.FORCE_LEDGER:
            return ForceLedgerRequest(txn, required(body, "ledgerId", where), priority)
        case OperationType.GET_BOOKIE_INFO:
            return GetBookieInfoRequest(txn, body.requested, priority)
    return AuthRequest(
        txn_id=txn,
        plugin_name=text(required(body, "authPluginName", where), "authPluginName", where),
        payload=required(body, "payload", where),
        priority=priority,
    )


def decode_response_message(data: bytes | bytearray | memoryview) -> Response:
    """The response in a serialized Response message; ProtocolError if malformed or unsupported.

    The status is the effective one (docs/wire-protocol.md §2): the top-level status unless it
    is EOK, else the body's. A rejection may come without a body (StatusOnlyResponse).
    """
    message = parse_message(pb.Response(), data, "Response")
    op, txn, _ = _header(message, "Response")
    # The hot path: a well-formed add or read response, every check inline, no error text.
    top = _STATUSES.get(message.status)
    if top is not None and message.HasField("status"):
        if op is OperationType.ADD_ENTRY and message.HasField("addResponse"):
            add = message.addResponse
            inner = _STATUSES.get(add.status)
            if (
                inner is not None
                and add.HasField("status")
                and add.HasField("ledgerId")
                and add.HasField("entryId")
            ):
                status = inner if top is StatusCode.EOK else top
                return AddResponse(txn, status, add.ledgerId, add.entryId)
        elif op is OperationType.READ_ENTRY and message.HasField("readResponse"):
            read = message.readResponse
            inner = _STATUSES.get(read.status)
            if (
                inner is not None
                and read.HasField("status")
                and read.HasField("ledgerId")
                and read.HasField("entryId")
            ):
                return ReadResponse(
                    txn,
                    inner if top is StatusCode.EOK else top,
                    read.ledgerId,
                    read.entryId,
                    read.body if read.HasField("body") else None,
                    read.maxLAC if read.HasField("maxLAC") else None,
                    read.lacUpdateTimestamp if read.HasField("lacUpdateTimestamp") else None,
                )
    return _decode_response(message, op, txn)


def _decode_response(message: pb.Response, op: OperationType, txn: int) -> Response:
    """decode_response_message for every other operation, and for finding and naming what is
    wrong with a message."""
    what = f"Response {op.name} txn {txn}"
    top = _status(message, what)
    name = _RESPONSE_BODIES.get(op)
    if name is None or not cast(Message, message).HasField(name):
        if top is StatusCode.EOK:
            raise ProtocolError(f"{what}: status EOK but no {op.name} response body")
        return StatusOnlyResponse(txn, op, top)
    body = getattr(message, name)
    where = f"{what} body"
    if op is OperationType.AUTH:
        plugin = text(required(body, "authPluginName", where), "authPluginName", where)
        return AuthResponse(txn, top, plugin, required(body, "payload", where))
    inner = _status(body, where)
    status = inner if top is StatusCode.EOK else top
    match op:
        case OperationType.ADD_ENTRY:
            return AddResponse(
                txn, status, required(body, "ledgerId", where), required(body, "entryId", where)
            )
        case OperationType.READ_ENTRY:
            return ReadResponse(
                txn_id=txn,
                status=status,
                ledger_id=required(body, "ledgerId", where),
                entry_id=required(body, "entryId", where),
                body=optional(body, "body"),
                max_lac=optional(body, "maxLAC"),
                lac_update_timestamp=optional(body, "lacUpdateTimestamp"),
            )
        case OperationType.WRITE_LAC:
            return WriteLacResponse(txn, status, required(body, "ledgerId", where))
        case OperationType.FORCE_LEDGER:
            return ForceLedgerResponse(txn, status, required(body, "ledgerId", where))
        case OperationType.READ_LAC:
            return ReadLacResponse(
                txn_id=txn,
                status=status,
                ledger_id=required(body, "ledgerId", where),
                lac_body=optional(body, "lacBody"),
                last_entry_body=optional(body, "lastEntryBody"),
            )
    return GetBookieInfoResponse(
        txn, status, optional(body, "totalDiskCapacity"), optional(body, "freeDiskSpace")
    )
