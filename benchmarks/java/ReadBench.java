// globelog's read benchmark, Java side: BookKeeper's own Java client reads one closed ledger
// from its first entry to its last, one read call at a time, and times it. `globelog bench
// reads` runs it beside globelog's reader on the same ledger and bookies. (BookKeeper's
// BenchReadThroughputLatency tails ledgers being written; on a closed ledger its 4.17.3 batch
// mode never ends and its single mode reports no time.)
//
// Run with: java -cp '<bookkeeper jars>/*' ReadBench.java URI PASSWORD LEDGER CALL_ENTRIES MODE
//   MODE batch: LedgerHandle.batchReadEntries (v2 protocol, BookKeeper 4.17's batched read)
//   MODE single: LedgerHandle.readEntries (v3, every entry of a call its own request)
// It prints "READ <entries> <bytes> <nanoseconds>" (the read calls only) and exits 0.
import java.nio.charset.StandardCharsets;
import java.util.Enumeration;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class ReadBench {
    public static void main(String[] args) throws Exception {
        boolean batch = args[4].equals("batch");
        ClientConfiguration conf = new ClientConfiguration();
        conf.setMetadataServiceUri(args[0]);
        conf.setReadEntryTimeout(10);
        conf.setUseV2WireProtocol(batch);
        conf.setBatchReadEnabled(batch);
        byte[] password = args[1].getBytes(StandardCharsets.UTF_8);
        long ledgerId = Long.parseLong(args[2]);
        int callEntries = Integer.parseInt(args[3]);
        BookKeeper client = new BookKeeper(conf);
        try {
            LedgerHandle ledger =
                    client.openLedgerNoRecovery(ledgerId, BookKeeper.DigestType.CRC32, password);
            long last = ledger.getLastAddConfirmed();
            long entries = 0;
            long bytes = 0;
            long next = 0;
            long began = System.nanoTime();
            while (next <= last) {
                long high = Math.min(last, next + callEntries - 1);
                Enumeration<LedgerEntry> read = batch
                        ? ledger.batchReadEntries(next, (int) (high - next + 1), -1)
                        : ledger.readEntries(next, high);
                long before = entries;
                while (read.hasMoreElements()) {
                    LedgerEntry entry = read.nextElement();
                    entries += 1;
                    bytes += entry.getEntryBuffer().readableBytes();
                    next = entry.getEntryId() + 1;
                    entry.getEntryBuffer().release();
                }
                if (entries == before) {
                    throw new IllegalStateException("no entry returned from entry " + next);
                }
            }
            long elapsed = System.nanoTime() - began;
            System.out.println("READ " + entries + " " + bytes + " " + elapsed);
            ledger.close();
        } finally {
            client.close();
        }
    }
}
