//go:build !unix

package h1client

// usable reports whether an idle connection may carry a request; without a non-blocking peek
// on this system, every idle connection is taken as usable.
func (c *conn) usable() bool { return true }
