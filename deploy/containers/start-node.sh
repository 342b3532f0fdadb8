#!/bin/sh
# Entry point of the bookie and ZooKeeper images: render the node's configuration from the
# topology (GLOBELOG_NODE names the node), then run the server in the foreground.
set -eu
role="$1"
node="${GLOBELOG_NODE:?set GLOBELOG_NODE to the node name in topology.yaml}"
data="${GLOBELOG_DATA_DIR:-/var/lib/globelog}"
conf="$data/conf/$role-$node.conf"
# the deployment's ZooKeeper login, mounted from `globelog security init`'s directory
security="${GLOBELOG_SECURITY_DIR:-/etc/globelog/security}"
login="-Djava.security.auth.login.config=$security/zookeeper.jaas"
globelog config "$role" "$node" --data-dir "$data" --write "$conf"
case "$role" in
  bookie)
    # BOOKIE_EXTRA_OPTS: its ZooKeeper login over ZooKeeper's TLS port, written beside the conf
    . "${conf%.conf}.env"
    BOOKIE_CONF="$conf" BOOKIE_EXTRA_OPTS="$BOOKIE_EXTRA_OPTS" exec /opt/bookkeeper/bin/bookkeeper bookie ;;
  zookeeper)
    # ZooKeeper's main class directly, over the jars scripts/zookeeper-jars.pom.xml resolves
    exec java -Xmx1g "$login" -cp "/opt/zookeeper/lib/*" \
      org.apache.zookeeper.server.quorum.QuorumPeerMain "$conf" ;;
  *) echo "start-node: unknown role $role (expected bookie or zookeeper)" >&2; exit 2 ;;
esac
