// Package routeset splits a Listener's routes into RouteSet resources and assembles them back:
// the controller sends a virtual host's routes one set per route hostname, so that a route change
// sends and hashes one set, and a proxy (or the server, for a proxy that predates RouteSets)
// copies the sets' routes into the listener's encoding byte for byte, without decoding them.
package routeset
