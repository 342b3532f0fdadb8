"""Each v3 request and response body to and from protobuf (the unframed Request / Response).

Field numbers are BookkeeperProtocol.proto's (listed per message in docs/wire-protocol.md).
The generic_* functions are the reference codec, built on ledger.codecs.protobuf; the hot messages
(AddRequest, ReadRequest, AddResponse, ReadResponse) take ledger.codecs.codec_fastpath, which gives
the same bytes and objects.
"""

from __future__ import annotations

from ledger.codecs.codec_fastpath import add_request_pieces, decode_response, read_request_message
from ledger.codecs.messages import (
    BODY_FIELDS,
    STATUS_FIELD,
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
    body_field,
    decode_header,
    envelope_request,
    envelope_response,
)
from ledger.codecs.protobuf import Fields, Writer, parse
from ledger.codes import LAST_ADD_CONFIRMED, OperationType, ReadFlag, StatusCode
from ledger.errors import ProtocolError

_FLAG_FIELD = 100  # AddRequest.flag and ReadRequest.flag
# Operations whose response bodies globelog decodes; others only as StatusOnlyResponse errors.
_RESPONSE_OPS = frozenset(
    {
        OperationType.ADD_ENTRY,
        OperationType.READ_ENTRY,
        OperationType.WRITE_LAC,
        OperationType.READ_LAC,
        OperationType.GET_BOOKIE_INFO,
        OperationType.FORCE_LEDGER,
        OperationType.AUTH,
    }
)
_RECOVERY_ADD = 1  # AddRequest.Flag.RECOVERY_ADD


def encode_request_message(request: Request) -> bytes:
    """The serialized Request message for `request` (without the frame length)."""
    return b"".join(encode_request_pieces(request))


def encode_request_pieces(request: Request) -> tuple[bytes, bytes, bytes]:
    """encode_request_message's bytes in three pieces to be joined in order: the middle one is an
    AddRequest's entry body, passed through uncopied (empty for other requests)."""
    if type(request) is AddRequest:
        return add_request_pieces(request)
    if type(request) is ReadRequest:
        _check_read(request)
        return read_request_message(request), b"", b""
    return generic_encode_request_message(request), b"", b""


def generic_encode_request_message(request: Request) -> bytes:
    """encode_request_message through the generic Writer: the reference for the fast paths."""
    body = Writer()
    match request:
        case AddRequest():
            body.int64(1, request.ledger_id).int64(2, request.entry_id)
            body.binary(3, request.master_key).binary(4, request.body)
            if request.write_flags is not None:
                body.int64(5, request.write_flags)
            if request.recovery:
                body.uint(_FLAG_FIELD, _RECOVERY_ADD)
        case ReadRequest():
            _check_read(request)
            body.int64(1, request.ledger_id).int64(2, request.entry_id)
            if request.master_key is not None:
                body.binary(3, request.master_key)
            if request.previous_lac is not None:
                body.int64(4, request.previous_lac)
            if request.timeout_ms is not None:
                body.int64(5, request.timeout_ms)
            if request.flag is not None:
                body.uint(_FLAG_FIELD, request.flag)
        case WriteLacRequest():
            body.int64(1, request.ledger_id).int64(2, request.lac)
            body.binary(3, request.master_key).binary(4, request.body)
        case ReadLacRequest() | ForceLedgerRequest():
            body.int64(1, request.ledger_id)
        case GetBookieInfoRequest():
            body.int64(1, request.requested)
        case AuthRequest():
            body.string(1, request.plugin_name).binary(2, request.payload)
    return envelope_request(request, body)


def decode_request_message(data: bytes | memoryview) -> Request:
    """The request in a serialized Request message; ProtocolError if malformed or unsupported."""
    fields = parse(data, "Request")
    header = decode_header(fields)
    op = header.operation
    what = f"Request {op.name} txn {header.txn_id}"
    field = body_field(op, what)
    body = fields.message(field, f"{what} body")
    if body is None:
        raise ProtocolError(f"{what}: the body field {field} is missing")
    txn, priority = header.txn_id, header.priority
    match op:
        case OperationType.ADD_ENTRY:
            flag = body.int32(_FLAG_FIELD)
            if flag not in (None, _RECOVERY_ADD):
                raise ProtocolError(f"{what}: unknown AddRequest flag {flag}")
            return AddRequest(
                txn_id=txn,
                ledger_id=_req_int64(body, 1, "ledgerId"),
                entry_id=_req_int64(body, 2, "entryId"),
                master_key=body.required(body.binary(3), 3, "masterKey"),
                body=body.required(body.binary(4), 4, "body"),
                recovery=flag == _RECOVERY_ADD,
                write_flags=body.int32(5),
                priority=priority,
            )
        case OperationType.READ_ENTRY:
            return ReadRequest(
                txn_id=txn,
                ledger_id=_req_int64(body, 1, "ledgerId"),
                entry_id=_req_int64(body, 2, "entryId"),
                flag=body.enum(_FLAG_FIELD, ReadFlag),
                master_key=body.binary(3),
                previous_lac=body.int64(4),
                timeout_ms=body.int64(5),
                priority=priority,
            )
        case OperationType.WRITE_LAC:
            return WriteLacRequest(
                txn_id=txn,
                ledger_id=_req_int64(body, 1, "ledgerId"),
                lac=_req_int64(body, 2, "lac"),
                master_key=body.required(body.binary(3), 3, "masterKey"),
                body=body.required(body.binary(4), 4, "body"),
                priority=priority,
            )
        case OperationType.READ_LAC:
            return ReadLacRequest(txn, _req_int64(body, 1, "ledgerId"), priority)
        case OperationType.FORCE_LEDGER:
            return ForceLedgerRequest(txn, _req_int64(body, 1, "ledgerId"), priority)
        case OperationType.GET_BOOKIE_INFO:
            return GetBookieInfoRequest(txn, body.int64(1) or 0, priority)
        case OperationType.AUTH:
            return AuthRequest(
                txn_id=txn,
                plugin_name=body.required(body.string(1), 1, "authPluginName"),
                payload=body.required(body.binary(2), 2, "payload"),
                priority=priority,
            )
    raise ProtocolError(f"{what}: operation {op.name} is not supported")


def encode_response_message(response: Response) -> bytes:
    """The serialized Response message for `response` (without the frame length)."""
    if isinstance(response, StatusOnlyResponse):
        assert response.status is not StatusCode.EOK, "an EOK response needs its body"
        return envelope_response(response, None)
    body = Writer().uint(1, response.status)
    match response:
        case AddResponse():
            body.int64(2, response.ledger_id).int64(3, response.entry_id)
        case ReadResponse():
            body.int64(2, response.ledger_id).int64(3, response.entry_id)
            if response.body is not None:
                body.binary(4, response.body)
            if response.max_lac is not None:
                body.int64(5, response.max_lac)
            if response.lac_update_timestamp is not None:
                body.int64(6, response.lac_update_timestamp)
        case WriteLacResponse() | ForceLedgerResponse():
            body.int64(2, response.ledger_id)
        case ReadLacResponse():
            body.int64(2, response.ledger_id)
            if response.lac_body is not None:
                body.binary(3, response.lac_body)
            if response.last_entry_body is not None:
                body.binary(4, response.last_entry_body)
        case GetBookieInfoResponse():
            if response.total_disk_capacity is not None:
                body.int64(2, response.total_disk_capacity)
            if response.free_disk_space is not None:
                body.int64(3, response.free_disk_space)
        case AuthResponse():
            # AuthMessage has no status field: the status travels only at the top level.
            body = Writer().string(1, response.plugin_name).binary(2, response.payload)
    return envelope_response(response, body)


def decode_response_message(data: bytes | memoryview) -> Response:
    """The response in a serialized Response message; ProtocolError if malformed or unsupported."""
    response = decode_response(data)
    if response is not None:
        return response
    return generic_decode_response_message(data)


def generic_decode_response_message(data: bytes | memoryview) -> Response:
    """decode_response_message through the generic parser: the reference for the fast path, and
    the path of every message it does not take (other operations, unusual layouts, errors)."""
    fields = parse(data, "Response")
    header = decode_header(fields)
    op, txn = header.operation, header.txn_id
    what = f"Response {op.name} txn {txn}"
    top_status = fields.required(fields.enum(STATUS_FIELD, StatusCode), STATUS_FIELD, "status")
    body = fields.message(BODY_FIELDS[op], f"{what} body") if op in _RESPONSE_OPS else None
    if body is None:
        if top_status is StatusCode.EOK:
            raise ProtocolError(f"{what}: status EOK but no {op.name} response body")
        return StatusOnlyResponse(txn, op, top_status)
    if op is OperationType.AUTH:
        return AuthResponse(
            txn_id=txn,
            status=top_status,
            plugin_name=body.required(body.string(1), 1, "authPluginName"),
            payload=body.required(body.binary(2), 2, "payload"),
        )
    inner = body.required(body.enum(1, StatusCode), 1, "status")
    status = inner if top_status is StatusCode.EOK else top_status
    return _decode_response_body(op, txn, status, body, what)


def _decode_response_body(
    op: OperationType, txn: int, status: StatusCode, body: Fields, what: str
) -> Response:
    match op:
        case OperationType.ADD_ENTRY:
            return AddResponse(
                txn, status, _req_int64(body, 2, "ledgerId"), _req_int64(body, 3, "entryId")
            )
        case OperationType.READ_ENTRY:
            return ReadResponse(
                txn_id=txn,
                status=status,
                ledger_id=_req_int64(body, 2, "ledgerId"),
                entry_id=_req_int64(body, 3, "entryId"),
                body=body.binary(4),
                max_lac=body.int64(5),
                lac_update_timestamp=body.int64(6),
            )
        case OperationType.WRITE_LAC:
            return WriteLacResponse(txn, status, _req_int64(body, 2, "ledgerId"))
        case OperationType.FORCE_LEDGER:
            return ForceLedgerResponse(txn, status, _req_int64(body, 2, "ledgerId"))
        case OperationType.READ_LAC:
            return ReadLacResponse(
                txn_id=txn,
                status=status,
                ledger_id=_req_int64(body, 2, "ledgerId"),
                lac_body=body.binary(3),
                last_entry_body=body.binary(4),
            )
        case OperationType.GET_BOOKIE_INFO:
            return GetBookieInfoResponse(txn, status, body.int64(2), body.int64(3))
    raise ProtocolError(f"{what}: operation {op.name} is not supported")


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


def _req_int64(fields: Fields, field: int, name: str) -> int:
    return fields.required(fields.int64(field), field, name)
