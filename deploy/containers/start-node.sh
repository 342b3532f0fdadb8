#!/bin/sh
# Entry point of the bookie and ZooKeeper images: render the node's configuration from the
# topology (GLOBELOG_NODE names the node), then run the server in the foreground.
set -eu
role="$1"
node="${GLOBELOG_NODE:?set GLOBELOG_NODE to the node name in topology.yaml}"
data="${GLOBELOG_DATA_DIR:-/var/lib/globelog}"
conf="$data/conf/$role-$node.conf"
globelog config "$role" "$node" --data-dir "$data" --write "$conf"
case "$role" in
  bookie) BOOKIE_CONF="$conf" exec /opt/bookkeeper/bin/bookkeeper bookie ;;
  zookeeper) exec /usr/share/zookeeper/bin/zkServer.sh start-foreground "$conf" ;;
  *) echo "start-node: unknown role $role (expected bookie or zookeeper)" >&2; exit 2 ;;
esac
