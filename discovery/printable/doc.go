// Package printable makes text that a peer sent (a proxy's node ID, the detail of its NACK) safe
// to show to people in status conditions, events and logs: no control characters, no invisible
// formatting, valid UTF-8, bounded in length.
package printable
