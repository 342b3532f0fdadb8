// globelog interoperability driver: runs BookKeeper's own Java client against the test cluster,
// so tests can check that globelog and the Java client read, write and fence each other's
// ledgers. Run with: java -cp '<bookkeeper jars>/*' LedgerTool.java <command> <args...>
//
// CONF is a BookKeeper client configuration file (metadata service, TLS to the bookies).
// Commands (every output line is "KEY value..." for the Python side to parse):
//   write   CONF PASSWORD E W A COUNT   create a CRC32C ledger, add COUNT entries "java-entry-<i>", close
//   hold    CONF PASSWORD E W A COUNT   like write but keep the ledger open, print "READY <id>",
//                                      wait for a line on stdin, then try one more add
//   read    CONF PASSWORD LEDGER        open without recovery and print every entry up to the LAC
//   recover CONF PASSWORD LEDGER        open with recovery (fences the writer), print the last entry
import java.io.BufferedReader;
import java.io.File;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.util.Base64;
import java.util.Enumeration;
import org.apache.bookkeeper.client.BKException;
import org.apache.bookkeeper.client.BookKeeper;
import org.apache.bookkeeper.client.LedgerEntry;
import org.apache.bookkeeper.client.LedgerHandle;
import org.apache.bookkeeper.conf.ClientConfiguration;

public class LedgerTool {
    public static void main(String[] args) throws Exception {
        // args[1]: a client configuration file (the metadata service, TLS to the bookies)
        ClientConfiguration conf = new ClientConfiguration();
        conf.loadConf(new File(args[1]).toURI().toURL());
        conf.setAddEntryTimeout(10);
        conf.setReadEntryTimeout(10);
        byte[] password = args[2].getBytes(StandardCharsets.UTF_8);
        BookKeeper client = new BookKeeper(conf);
        try {
            switch (args[0]) {
                case "write": write(client, password, args, false); break;
                case "hold": write(client, password, args, true); break;
                case "read": read(client.openLedgerNoRecovery(
                        Long.parseLong(args[3]), BookKeeper.DigestType.CRC32C, password)); break;
                case "recover": read(client.openLedger(
                        Long.parseLong(args[3]), BookKeeper.DigestType.CRC32C, password)); break;
                default: throw new IllegalArgumentException("unknown command " + args[0]);
            }
        } finally {
            client.close();
        }
    }

    static void write(BookKeeper client, byte[] password, String[] args, boolean hold)
            throws Exception {
        int e = Integer.parseInt(args[3]), w = Integer.parseInt(args[4]), a = Integer.parseInt(args[5]);
        int count = Integer.parseInt(args[6]);
        LedgerHandle ledger = client.createLedger(e, w, a, BookKeeper.DigestType.CRC32C, password);
        System.out.println("LEDGER " + ledger.getId());
        for (int i = 0; i < count; i++) {
            ledger.addEntry(("java-entry-" + i).getBytes(StandardCharsets.UTF_8));
        }
        if (!hold) {
            ledger.close();
            System.out.println("CLOSED " + ledger.getLastAddConfirmed());
            return;
        }
        System.out.println("READY " + ledger.getId());
        System.out.flush();
        new BufferedReader(new InputStreamReader(System.in)).readLine();
        try {
            ledger.addEntry("java-after-fence".getBytes(StandardCharsets.UTF_8));
            System.out.println("ADDED");
        } catch (BKException err) {
            System.out.println("ADD_FAILED " + err.getCode() + " " + err.getClass().getSimpleName());
        }
    }

    static void read(LedgerHandle ledger) throws Exception {
        long last = ledger.isClosed() ? ledger.getLastAddConfirmed() : ledger.readLastConfirmed();
        System.out.println("LAST " + last);
        if (last >= 0) {
            Enumeration<LedgerEntry> entries = ledger.readEntries(0, last);
            while (entries.hasMoreElements()) {
                LedgerEntry entry = entries.nextElement();
                System.out.println("ENTRY " + entry.getEntryId() + " "
                        + Base64.getEncoder().encodeToString(entry.getEntry()));
            }
        }
        ledger.close();
    }
}
