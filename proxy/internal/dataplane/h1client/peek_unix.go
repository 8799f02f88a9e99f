//go:build unix

package h1client

import (
	"errors"
	"syscall"
)

// peeker holds what the idle check needs, made once per connection.
type peeker struct {
	rc      syscall.RawConn
	peekFn  func(fd uintptr) bool
	peekErr error
	peekBuf [1]byte
}

// usable reports whether an idle connection may carry a request: the backend has not closed
// it and sent nothing while it was idle (a byte there would be taken for the next response).
// One non-blocking peek at the socket, which sees a backend's FIN or RST as well.
func (c *conn) usable() bool {
	if c.peekFn == nil {
		sc, ok := c.raw.(syscall.Conn)
		if !ok {
			return true
		}
		rc, err := sc.SyscallConn()
		if err != nil {
			return false
		}
		c.rc, c.peekFn = rc, c.peek
	}
	c.peekErr = nil
	if err := c.rc.Read(c.peekFn); err != nil {
		return false
	}
	// EAGAIN: nothing to read, the connection is open and quiet. A byte, an end of file
	// (no error) or any other error retires it.
	return errors.Is(c.peekErr, syscall.EAGAIN)
}

func (c *conn) peek(fd uintptr) bool {
	_, _, c.peekErr = syscall.Recvfrom(int(fd), c.peekBuf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
	return true
}
