package bootstrap

import (
	"context"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"coxswain.dev/coxswain/discovery/pki/pkitest"
)

// reviewDelay answers like an API server that takes delay per review: the forged tokens are
// refused, every other token is the shared proxy.
type reviewDelay struct{ delay time.Duration }

func (r reviewDelay) Authenticate(ctx context.Context, token string) (Principal, error) {
	select {
	case <-time.After(r.delay):
	case <-ctx.Done():
		return Principal{}, ctx.Err()
	}
	if len(token) > 0 && token[len(token)-1] == 'X' {
		return Principal{}, ErrUnauthenticated
	}
	return sharedProxy, nil
}

// Measures a real proxy's bootstrap latency while one source floods the listener with garbage
// and with well-formed forged tokens under a 300 ms review. Set COXSWAIN_MEASURE=1 to run it.
func TestMeasureBootstrapLatencyDuringAFlood(t *testing.T) {
	if os.Getenv("COXSWAIN_MEASURE") == "" {
		t.Skip("set COXSWAIN_MEASURE=1 to measure")
	}
	e := newAdmissionEnv(t, func(c *Config) { c.Authenticator = reviewDelay{delay: 300 * time.Millisecond} })
	ctx, cancel := context.WithCancel(t.Context())
	attackers := []string{"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[codes.Code]int{}
	for a, source := range attackers {
		c := e.clientFrom(t, source, nil)
		for w := range 50 {
			wg.Go(func() {
				for i := 0; ctx.Err() == nil; i++ {
					token := "garbage"
					if w%2 == 0 {
						token = pkitest.Token("attacker", "sa-"+strconv.Itoa(a*1000+w)) + strconv.Itoa(i) + "X"
					}
					_, err := c.Bootstrap(ctx, withToken(t, token))
					mu.Lock()
					seen[status.Code(err)]++
					mu.Unlock()
				}
			})
		}
	}
	time.Sleep(time.Second) // lets the flood build up: a measurement, not synchronisation
	for _, lane := range []string{"first bootstrap", "renewal"} {
		var latencies []time.Duration
		for range 10 {
			c := e.clientFrom(t, "127.0.0.1", nil)
			if lane == "renewal" {
				c = e.clientFrom(t, "127.0.0.1", e.pki.SVID(t, "spiffe://cluster.local/ns/coxswain-system/sa/coxswain-shared-proxy"))
			}
			start := time.Now()
			_, err := c.Bootstrap(t.Context(), request(t))
			latencies = append(latencies, time.Since(start))
			if err != nil {
				t.Errorf("%s during the flood: %v", lane, err)
			}
		}
		t.Logf("%s latency during the flood (review 300 ms): %v", lane, latencies)
	}
	cancel()
	wg.Wait()
	t.Logf("flood results by code: %v", seen)
}
