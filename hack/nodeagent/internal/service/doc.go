// Package service is the node's service proxy and load-balancer controller, in place of
// kube-proxy (which needs nftables or iptables, absent here): it watches Services and
// EndpointSlices, gives each LoadBalancer Service an address of its own from a pool (kept in
// the Service's status), and forwards every TCP connection and UDP flow to a ClusterIP or
// load-balancer address and port to a ready endpoint, in user space, from the node's network
// namespace.
package service
