// Package client is the proxy side of the discovery channel: Bootstrap trades the projected
// token and a fresh in-memory key for an SVID, and Stream subscribes to a scope's snapshots and
// answers each with an ACK or NACK. Backoff, renewal and readiness belong to the proxy's
// supervisor, built on top of these primitives.
package client
