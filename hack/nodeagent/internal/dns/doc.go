// Package dns gives the cluster its DNS: it runs CoreDNS (built by hack/coredns-assets.sh) as
// a child of the node agent on the bridge address, port 53, answering the cluster domain from
// the API server's Services and EndpointSlices, and writes pods' /etc/resolv.conf by their
// dnsPolicy and dnsConfig.
package dns
