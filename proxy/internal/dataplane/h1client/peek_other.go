//go:build !unix

package h1client

// peeker is empty where there is no peek.
type peeker struct{}

// usable reports whether an idle connection may carry a request; without a non-blocking peek
// on this system, every idle connection is taken as usable.
func (c *conn) usable() bool { return true }
