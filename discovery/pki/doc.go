// Package pki is the pure certificate authority of the discovery channel: it creates and
// parses the CA, checks proxy CSRs, signs SVIDs whose only name is the authenticated SPIFFE
// ID, and decides which roots the trust bundle publishes during a rotation. Every function
// takes the clock as a parameter and none talks to the cluster.
package pki
