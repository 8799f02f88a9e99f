//go:build !linux

package h1server

import "errors"

// poller parks idle connections on Linux only; elsewhere connections keep their goroutine.
type poller struct{}

func newPoller(*Server) (*poller, error) { return nil, errors.New("h1server: no idle poller") }
func (*poller) park(*conn) bool          { return false }
func (*poller) take(*conn) bool          { return false }
func (*poller) stop()                    {}
