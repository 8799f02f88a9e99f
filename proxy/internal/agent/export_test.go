package agent

import (
	"context"
	"crypto/tls"
	"time"
)

// BootstrapOnce runs one bootstrap and returns the SVID and when it would be renewed.
func (a *Agent) BootstrapOnce(ctx context.Context) (*tls.Certificate, time.Time, error) {
	s, err := a.bootstrap(ctx)
	if err != nil {
		return nil, time.Time{}, err
	}
	return s.certificate, s.renewAt, nil
}
