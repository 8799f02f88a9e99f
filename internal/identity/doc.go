// Package identity answers the bootstrap service's questions about a caller: who a projected
// ServiceAccount token belongs to (a TokenReview plus a live-pod check), whether that identity may
// hold an SVID (the allowlist), and how a refusal is recorded (a BootstrapRejected event). Its
// subpackages run the discovery CA (castore), publish its roots (trustbundle) and keep the
// controller's own serving certificate fresh (servingcert).
package identity
