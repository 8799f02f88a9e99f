// Package spiffe maps Kubernetes ServiceAccounts to SPIFFE IDs of the form
// spiffe://<trust-domain>/ns/<namespace>/sa/<serviceaccount> and back, and verifies the SPIFFE
// ID of a TLS peer with go-spiffe (x509svid), which already refuses a certificate without
// exactly one URI SAN. On top of go-spiffe a workload ID must have a path and an extended key
// usage for its direction, and every refusal carries a sentinel error of this package.
package spiffe
