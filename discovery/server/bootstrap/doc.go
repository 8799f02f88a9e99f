// Package bootstrap is the discovery bootstrap service: it exchanges a proxy's projected
// ServiceAccount token and CSR for a short-lived SVID. Token review, the issuance allowlist, the
// CA and the rejection events are injected by the operator; every rejection gets a gRPC code, a
// reason, a report and a metric.
package bootstrap
