// Package discoveryserver runs the controller's discovery listeners on every replica: the
// server-authenticated bootstrap listener and, when a snapshot cache and a scope authority are
// given, the mTLS stream listener. It serves only while the CA is usable (fail closed), restarts
// the listeners when their settings change, keeps the serving certificate fresh, reports
// DiscoveryServing on the readiness board, and stops gracefully.
package discoveryserver
