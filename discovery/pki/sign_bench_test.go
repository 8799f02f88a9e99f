package pki_test

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// BenchmarkSignCSR measures the bootstrap service's signing path for one ECDSA P-256 CSR:
// CheckCSR (parse, key and self-signature checks) then SignSVID (a leaf signed by an ECDSA
// P-256 CA), on every core at once. csr/s/core is the throughput over the run divided by
// GOMAXPROCS; run it with -cpu 1,2 to see how it scales.
func BenchmarkSignCSR(b *testing.B) {
	ca := pkitest.NewCA(b, "cluster.local")
	csrs := make([][]byte, 64)
	for i := range csrs {
		csrs[i] = pkitest.CSR(b)
	}
	now := time.Now()
	var next atomic.Uint64
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			csr, err := pki.CheckCSR(csrs[next.Add(1)%uint64(len(csrs))])
			if err != nil {
				b.Error(err)
				return
			}
			if _, _, err := ca.SignSVID(csr, svidID, wellknown.DefaultSVIDTTL, now); err != nil {
				b.Error(err)
				return
			}
		}
	})
	perCore := float64(b.N) / time.Since(start).Seconds() / float64(runtime.GOMAXPROCS(0))
	b.ReportMetric(perCore, "csr/s/core")
}
