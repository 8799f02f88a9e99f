// Package readiness collects the state of the operator's long-running components (the CA, the
// discovery listeners, the trust bundle publisher) as Kubernetes conditions, so the
// CoxswainConfig reconciler can report them without knowing how each component works.
package readiness
