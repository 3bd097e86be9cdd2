# shellcheck shell=bash
# The kubernetes Service's ClusterIP for pods on the real node, without a
# kube-proxy. kubelet gives every container KUBERNETES_SERVICE_HOST=10.96.0.1
# and KUBERNETES_SERVICE_PORT=443 (the Service's ClusterIP, the first address
# of --service-cluster-ip-range), which in-cluster clients such as
# nodeimage's use. The API server listens on loopback only, so these NAT rules
# send that address to it, as kube-proxy sends a ClusterIP to its endpoints:
# OUTPUT for host-network pods and the host, PREROUTING for pods on the
# bridge. route_localnet lets the kernel route bridge traffic to 127.0.0.1.
# The rules live in their own chain, named after the API server's port, and
# are removed by service_vip_down.
#
# Sourced by tests/cluster/up.sh and down.sh (after lib.sh).

SERVICE_VIP=10.96.0.1

# service_vip_up API_PORT
service_vip_up() {
  local port=$1 chain=NODEIMAGE-SVC-$1 hook
  command -v iptables >/dev/null || die "iptables is missing (Debian package iptables)"
  iptables -w -t nat -N "$chain" 2>/dev/null || iptables -w -t nat -F "$chain"
  iptables -w -t nat -A "$chain" -d "$SERVICE_VIP/32" -p tcp --dport 443 \
    -j DNAT --to-destination "127.0.0.1:$port"
  for hook in OUTPUT PREROUTING; do
    iptables -w -t nat -C "$hook" -j "$chain" 2>/dev/null ||
      iptables -w -t nat -I "$hook" 1 -j "$chain"
  done
  sysctl -qw net.ipv4.conf.all.route_localnet=1 ||
    die "cannot set net.ipv4.conf.all.route_localnet=1 (pods on the bridge could not reach the API server)"
}

# service_vip_down API_PORT
service_vip_down() {
  local chain=NODEIMAGE-SVC-$1 hook
  command -v iptables >/dev/null || return 0
  for hook in OUTPUT PREROUTING; do
    while iptables -w -t nat -D "$hook" -j "$chain" 2>/dev/null; do :; done
  done
  iptables -w -t nat -F "$chain" 2>/dev/null || true
  iptables -w -t nat -X "$chain" 2>/dev/null || true
}
