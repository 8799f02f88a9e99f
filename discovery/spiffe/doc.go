// Package spiffe maps Kubernetes ServiceAccounts to SPIFFE IDs of the form
// spiffe://<trust-domain>/ns/<namespace>/sa/<serviceaccount> and back, and extracts the
// authenticated SPIFFE ID of a TLS peer. It is stricter than go-spiffe: a workload ID
// must have a path, and a peer certificate must carry exactly one URI SAN.
package spiffe
