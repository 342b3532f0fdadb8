"""Sans-IO codecs of the ledger client: bytes in, bytes out, every length checked.

The v3 bookie messages (messages, message_codec, frames), the v2 batched reads (batch_codec),
entry and LAC packets with their digests (entry), ledger metadata in BookKeeper's znode format
(metadata). They import only ledger.codes and ledger.errors.
"""
