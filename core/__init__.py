"""globelog's pure shared kernel: ids, errors, the topology model and the durability rule.

Glossary (one word per concept, used everywhere in globelog):
  stream    a named, totally ordered log; the unit users write to and read from.
  segment   a contiguous piece of a stream, stored in exactly one ledger.
  ledger    the BookKeeper object under a segment: an append-only sequence of entries.
  entry     one unit of ledger replication; carries one or more records.
  record    one user payload inside an entry.
  DLSN      (segment sequence number, entry id, slot): a record's position in its stream.
  txid      the writer-assigned, monotonic transaction id of a record.
  LAC       last add confirmed: the highest entry id such that it and every earlier entry
            reached the ack quorum.
  ensemble  the bookies a ledger stripes its entries over (size E).
  write quorum  the W bookies of the ensemble that receive one entry.
  ack quorum    the A acks that make an entry acknowledged.
  bookie    a BookKeeper storage server.
  region, rack  a bookie's failure domains, written /region/rack.
  owner     the write proxy holding a stream's ownership.
  fence     making a ledger refuse further normal adds.
  epoch, session  a writer generation that a fenced former owner cannot address.
"""
