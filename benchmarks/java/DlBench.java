// globelog's DistributedLog benchmark, Java side: DistributedLog's own library (the system
// globelog's design comes from) writes and reads a log stream on the same ZooKeeper and
// bookies as globelog, one run per JVM. `globelog bench dl` runs it beside globelog's library,
// run for run, with the same record sizes, windows and buffer settings.
//
// Run with: java -cp '<distributedlog jars>/*' DlBench.java MODE URI ZK LOG E W A OUT [ARGS...]
//   URI   the namespace, distributedlog://HOST:PORT/PATH (bound to the bookies here if needed)
//   ZK    ZooKeeper HOST:PORT[,...] of the bookies' metadata (its /ledgers)
//   LOG   a new log's name; E W A the ensemble, write and ack quorum sizes
//   OUT   a file of latencies, one per line, in microseconds
// MODE and its ARGS:
//   commit COUNT                      one record of 100 B at a time, each on its own entry
//   write SIZE SECONDS WINDOW BUFFER FLUSH_MS
//                                     records of SIZE bytes, WINDOW outstanding, for SECONDS;
//                                     BUFFER 0: an entry per record, else entries of up to
//                                     BUFFER bytes, flushed at least every FLUSH_MS
//   tail RATE SECONDS BUFFER FLUSH_MS a writer paced at RATE records/s of 100 B and a reader
//                                     of the same log: write -> read latency; then a second
//                                     reader reads the whole log from its start (catch-up)
//   own                               the log's writer: a 100 B record every 10 ms until the
//                                     process is killed; prints "OWNING" after the first
//   standby                           prints "WAITING", opens the log's writer (which queues
//                                     for the lock the owner holds), writes one record and
//                                     prints "TAKEOVER <epoch ms>" when it is acknowledged
// DistributedLog's ZooKeeper session (its lock's) is -Ddlbench.zk.session.seconds (whole
// seconds; default DistributedLog's, 30).
// Each run first writes for -Ddlbench.warmup.seconds (default 5) to a log of its own (JIT,
// connections), unmeasured.
// It prints "RESULT <label> <records> <nanoseconds>" per measured run and exits 0.
import java.io.PrintWriter;
import java.net.URI;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.Semaphore;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.apache.distributedlog.DLSN;
import org.apache.distributedlog.DistributedLogConfiguration;
import org.apache.distributedlog.LogRecord;
import org.apache.distributedlog.LogRecordWithDLSN;
import org.apache.distributedlog.api.AsyncLogReader;
import org.apache.distributedlog.api.AsyncLogWriter;
import org.apache.distributedlog.api.DistributedLogManager;
import org.apache.distributedlog.api.namespace.Namespace;
import org.apache.distributedlog.api.namespace.NamespaceBuilder;
import org.apache.distributedlog.exceptions.ZKException;
import org.apache.distributedlog.impl.metadata.BKDLConfig;
import org.apache.distributedlog.metadata.DLMetadata;

public class DlBench {
    static final int WARMUP_S = Integer.getInteger("dlbench.warmup.seconds", 5);
    static final int ZK_SESSION_S = Integer.getInteger("dlbench.zk.session.seconds", 30);
    static final int SAMPLES_MAX = 4_000_000;
    static final long DRAIN_S = 60;
    static final int READ_BULK = 1000; // records a tailing or catch-up read asks for at a time

    /** Latencies of completed operations, from any thread. */
    static final class Latencies {
        final long[] micros;
        final AtomicInteger count = new AtomicInteger();

        Latencies(int capacity) {
            micros = new long[capacity];
        }

        void add(long sentNanos) {
            int i = count.getAndIncrement();
            if (i < micros.length) {
                micros[i] = (System.nanoTime() - sentNanos) / 1000;
            }
        }

        void save(Path out) throws Exception {
            try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(out))) {
                int n = Math.min(count.get(), micros.length);
                for (int i = 0; i < n; i++) {
                    w.println(micros[i]);
                }
            }
        }
    }

    public static void main(String[] args) throws Exception {
        String mode = args[0];
        URI uri = URI.create(args[1]);
        String zk = args[2];
        String log = args[3];
        int e = Integer.parseInt(args[4]), w = Integer.parseInt(args[5]), a = Integer.parseInt(args[6]);
        Path out = Path.of(args[7]);
        bind(uri, zk);
        int buffer = switch (mode) {
            case "commit", "own", "standby" -> 0;
            case "write" -> Integer.parseInt(args[11]);
            case "tail" -> Integer.parseInt(args[10]);
            default -> throw new IllegalArgumentException(
                    "mode " + mode + ": expected commit, write, tail, own or standby");
        };
        int flushMs = switch (mode) {
            case "write" -> Integer.parseInt(args[12]);
            case "tail" -> Integer.parseInt(args[11]);
            default -> 0;
        };
        DistributedLogConfiguration conf = new DistributedLogConfiguration();
        conf.setEnsembleSize(e);
        conf.setWriteQuorumSize(w);
        conf.setAckQuorumSize(a);
        conf.setOutputBufferSize(buffer);
        conf.setPeriodicFlushFrequencyMilliSeconds(flushMs);
        // tail: a control record after each flush moves the last-add-confirmed on, so the
        // reader sees the newest entry without waiting for the next one (elsewhere it would
        // double the entries written)
        conf.setImmediateFlushEnabled(mode.equals("tail"));
        conf.setCreateStreamIfNotExists(true);
        conf.setZKSessionTimeoutSeconds(ZK_SESSION_S);
        // Readers keep up with the writer. A log segment's entry reader has at most
        // numPrefetchEntriesPerLogSegment reads in flight (default 4), one entry each, so a
        // reader of one- or two-record entries fell behind a 2000 records/s writer whenever a
        // bookie round trip took over 2 ms (here, on shared cores, 2.5-3.5 ms): 64 in flight,
        // with room for them in its cache (maxPrefetchEntriesPerLogSegment, default 32).
        // The read-ahead's hand-over sizes (2 entries a batch, 10 cached) are raised too.
        conf.setNumPrefetchEntriesPerLogSegment(64);
        conf.setMaxPrefetchEntriesPerLogSegment(512);
        conf.setReadAheadBatchSize(64);
        conf.setReadAheadMaxRecords(10_000);
        Namespace namespace = NamespaceBuilder.newBuilder().conf(conf).uri(uri).clientId("globelog-bench").build();
        try {
            if (WARMUP_S > 0) {
                write(namespace, log + "-warmup", 100, WARMUP_S, 512, new Latencies(1));
            }
            Latencies latencies = new Latencies(SAMPLES_MAX);
            switch (mode) {
                case "commit" -> commit(namespace, log, Integer.parseInt(args[8]), latencies);
                case "own" -> own(namespace, log);
                case "standby" -> standby(namespace, log);
                case "write" -> {
                    int size = Integer.parseInt(args[8]);
                    long[] done = write(namespace, log, size, Integer.parseInt(args[9]), Integer.parseInt(args[10]), latencies);
                    System.out.println("RESULT write-" + size + " " + done[0] + " " + done[1]);
                }
                default -> tail(namespace, log, Integer.parseInt(args[8]), Integer.parseInt(args[9]), latencies, out);
            }
            latencies.save(out);
        } finally {
            namespace.close();
        }
    }

    /** Binds the namespace to the bookies' metadata, unless it is bound already. */
    static void bind(URI uri, String zk) throws Exception {
        try {
            DLMetadata.create(new BKDLConfig(zk, zk, zk, zk, "/ledgers")).create(uri);
        } catch (ZKException bound) {
            if (bound.getKeeperExceptionCode() != org.apache.zookeeper.KeeperException.Code.NODEEXISTS) {
                throw bound;
            }
        }
    }

    static void commit(Namespace namespace, String log, int count, Latencies latencies) throws Exception {
        DistributedLogManager manager = namespace.openLog(log);
        AsyncLogWriter writer = manager.openAsyncLogWriter().get(DRAIN_S, TimeUnit.SECONDS);
        byte[] payload = new byte[100];
        long began = System.nanoTime();
        for (long txid = 1; txid <= count; txid++) {
            long sent = System.nanoTime();
            writer.write(new LogRecord(txid, payload)).get(DRAIN_S, TimeUnit.SECONDS);
            latencies.add(sent);
        }
        System.out.println("RESULT commit " + count + " " + (System.nanoTime() - began));
        writer.asyncClose().get(DRAIN_S, TimeUnit.SECONDS);
        manager.close();
    }

    /** Writes until the process is killed, holding the log's lock. */
    static void own(Namespace namespace, String log) throws Exception {
        DistributedLogManager manager = namespace.openLog(log);
        AsyncLogWriter writer = manager.openAsyncLogWriter().get(DRAIN_S, TimeUnit.SECONDS);
        byte[] payload = new byte[100];
        for (long txid = 1; ; txid++) {
            writer.write(new LogRecord(txid, payload)).get(DRAIN_S, TimeUnit.SECONDS);
            if (txid == 1) {
                System.out.println("OWNING");
                System.out.flush();
            }
            TimeUnit.MILLISECONDS.sleep(10);
        }
    }

    /** Queues for the log's lock, then writes one record: its acknowledgement's wall time. */
    static void standby(Namespace namespace, String log) throws Exception {
        DistributedLogManager manager = namespace.openLog(log);
        System.out.println("WAITING");
        System.out.flush();
        AsyncLogWriter writer = manager.openAsyncLogWriter().get(DRAIN_S, TimeUnit.SECONDS);
        // past any txid the owner wrote (1, 2, ...): no look at the log's end in the way
        writer.write(new LogRecord(Long.MAX_VALUE / 2, new byte[100])).get(DRAIN_S, TimeUnit.SECONDS);
        System.out.println("TAKEOVER " + System.currentTimeMillis());
        System.out.println("RESULT takeover 1 0");
        System.out.flush();
        writer.asyncClose().get(DRAIN_S, TimeUnit.SECONDS);
        manager.close();
    }

    /** Records of `size` bytes for `seconds`, `window` outstanding: {records, nanoseconds}. */
    static long[] write(Namespace namespace, String log, int size, int seconds, int window, Latencies latencies)
            throws Exception {
        DistributedLogManager manager = namespace.openLog(log);
        AsyncLogWriter writer = manager.openAsyncLogWriter().get(DRAIN_S, TimeUnit.SECONDS);
        Semaphore room = new Semaphore(window);
        AtomicReference<Throwable> failed = new AtomicReference<>();
        byte[] payload = new byte[size];
        long began = System.nanoTime();
        long deadline = began + TimeUnit.SECONDS.toNanos(seconds);
        long txid = 0;
        while (System.nanoTime() < deadline && failed.get() == null) {
            if (!room.tryAcquire(100, TimeUnit.MILLISECONDS)) {
                continue;
            }
            long sent = System.nanoTime();
            writer.write(new LogRecord(++txid, payload)).whenComplete((dlsn, error) -> {
                if (error != null) {
                    failed.compareAndSet(null, error);
                } else {
                    latencies.add(sent);
                }
                room.release();
            });
        }
        if (!room.tryAcquire(window, DRAIN_S, TimeUnit.SECONDS)) {
            throw new IllegalStateException("writes still outstanding " + DRAIN_S + " s after the run");
        }
        long elapsed = System.nanoTime() - began;
        if (failed.get() != null) {
            throw new IllegalStateException("a write failed", failed.get());
        }
        writer.asyncClose().get(DRAIN_S, TimeUnit.SECONDS);
        manager.close();
        return new long[] {txid, elapsed};
    }

    static void tail(Namespace namespace, String log, int rate, int seconds, Latencies latencies, Path out)
            throws Exception {
        DistributedLogManager manager = namespace.openLog(log);
        AsyncLogWriter writer = manager.openAsyncLogWriter().get(DRAIN_S, TimeUnit.SECONDS);
        int total = rate * seconds;
        long[] sentAt = new long[total];
        AsyncLogReader reader = manager.openAsyncLogReader(DLSN.InitialDLSN).get(DRAIN_S, TimeUnit.SECONDS);
        CompletableFuture<Void> consumed = CompletableFuture.runAsync(() -> {
            try {
                // readBulk: the records available now (1..n), one scheduler hand-over for all
                for (int i = 0; i < total; ) {
                    for (LogRecordWithDLSN record : reader.readBulk(READ_BULK).get(DRAIN_S, TimeUnit.SECONDS)) {
                        latencies.add(sentAt[(int) record.getTransactionId() - 1]);
                        i++;
                    }
                }
            } catch (Exception error) {
                throw new IllegalStateException("the tailing reader failed", error);
            }
        });
        byte[] payload = new byte[100];
        long began = System.nanoTime();
        for (int i = 0; i < total; i++) {
            long due = began + (long) i * 1_000_000_000L / rate;
            long wait = due - System.nanoTime();
            if (wait > 0) {
                TimeUnit.NANOSECONDS.sleep(wait);
            }
            sentAt[i] = System.nanoTime();
            writer.write(new LogRecord(i + 1, payload));
        }
        consumed.get(DRAIN_S, TimeUnit.SECONDS);
        System.out.println("RESULT tail " + total + " " + (System.nanoTime() - began));
        reader.asyncClose().get(DRAIN_S, TimeUnit.SECONDS);
        writer.asyncClose().get(DRAIN_S, TimeUnit.SECONDS);
        // catch-up: a new reader of the whole (now quiet) log from its first record
        AsyncLogReader catchUp = manager.openAsyncLogReader(DLSN.InitialDLSN).get(DRAIN_S, TimeUnit.SECONDS);
        long start = System.nanoTime();
        for (int read = 0; read < total; ) {
            read += catchUp.readBulk(READ_BULK).get(DRAIN_S, TimeUnit.SECONDS).size();
        }
        System.out.println("RESULT catch-up " + total + " " + (System.nanoTime() - start));
        catchUp.asyncClose().get(DRAIN_S, TimeUnit.SECONDS);
        manager.close();
    }
}
