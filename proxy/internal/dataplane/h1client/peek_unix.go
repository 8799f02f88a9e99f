//go:build unix

package h1client

import (
	"errors"
	"syscall"
)

// usable reports whether an idle connection may carry a request: the backend has not closed
// it and sent nothing while it was idle (a byte there would be taken for the next response).
// One non-blocking peek at the socket, which sees a backend's FIN or RST as well.
func (c *conn) usable() bool {
	sc, ok := c.raw.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	var buf [1]byte
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		_, _, perr = syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		return true
	})
	// EAGAIN: nothing to read, the connection is open and quiet. A byte, an end of file
	// (no error) or any other error retires it.
	return err == nil && errors.Is(perr, syscall.EAGAIN)
}
