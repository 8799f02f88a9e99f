// Package pkitest makes CAs, certificates and CSRs for tests of the discovery channel,
// including the malformed ones a real CA never issues: expired, foreign, with no or several
// URI SANs, CSRs with weak keys, CA requests or a broken signature.
package pkitest
