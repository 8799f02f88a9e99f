// Package conformance runs the Gateway API conformance suite, at the version this module pins,
// against Coxswain on the local cluster (`make conformance`): it creates the GatewayClass of a
// mode (every Gateway dedicated, or every Gateway on the shared pool), takes the features to
// test from that class's status, and reads the suite's report back into one line per profile.
package conformance
