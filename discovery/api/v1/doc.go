// Package discoveryv1 holds the discovery protocol between the Coxswain controller and its
// proxies: the messages and gRPC service generated from discovery.proto (by hack/proto.sh) and the
// wire version both ends must agree on.
package discoveryv1
