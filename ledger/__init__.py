"""globelog's BookKeeper ledger client: sans-IO codecs for the bookie wire protocol and metadata.

Modules (bytes in, bytes out; no sockets, no asyncio):
  codes       the numbers of BookKeeper's v3 protocol (versions, operations, status codes, flags)
  errors      the ledger errors and the one table mapping bookie status codes to them
  protobuf    a minimal, bounded proto2 wire-format encoder and parser
  messages    typed v3 requests and responses and their protobuf bodies
  frames      the 4-byte length-prefixed framing: encode_request, FrameDecoder
  entry       entry and explicit-LAC packets with digests; master key derivation
  metadata    LedgerMetadata in BookKeeper's v3 binary format; znode paths; ledger id generation

docs/wire-protocol.md describes the facts these modules implement and where they come from.
"""
