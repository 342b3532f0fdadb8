#!/bin/sh
# Entry point of the bookie and ZooKeeper images: render the node's configuration from the
# topology (GLOBELOG_NODE names the node), then run the server in the foreground.
set -eu
role="$1"
node="${GLOBELOG_NODE:?set GLOBELOG_NODE to the node name in topology.yaml}"
data="${GLOBELOG_DATA_DIR:-/var/lib/globelog}"
conf="$data/conf/$role-$node.conf"
# the deployment's ZooKeeper login, mounted from `globelog security init`'s directory
login="-Djava.security.auth.login.config=${GLOBELOG_SECURITY_DIR:-/etc/globelog/security}/zookeeper.jaas"
globelog config "$role" "$node" --data-dir "$data" --write "$conf"
case "$role" in
  bookie) BOOKIE_CONF="$conf" BOOKIE_EXTRA_OPTS="$login" exec /opt/bookkeeper/bin/bookkeeper bookie ;;
  zookeeper) SERVER_JVMFLAGS="$login" exec /usr/share/zookeeper/bin/zkServer.sh start-foreground "$conf" ;;
  *) echo "start-node: unknown role $role (expected bookie or zookeeper)" >&2; exit 2 ;;
esac
