package pki_test

import (
	"runtime"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/pki/pkitest"
	"coxswain.dev/coxswain/discovery/wellknown"
)

// BenchmarkSignCSR measures the bootstrap service's signing path for one ECDSA P-256 CSR:
// CheckCSR (parse, key and self-signature checks) then SignSVID (a leaf signed by an ECDSA
// P-256 CA), on every core at once. csr/s/core is the throughput over the run divided by
// GOMAXPROCS; run it with -cpu 1,2 to see how it scales. On a loaded machine the cores are not
// all ours, so csr/cpu-s, the CSRs signed per second of CPU time the process used (garbage
// collection included), says what one core that is ours would sign.
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
	start, cpuBefore := time.Now(), cpuTime(b)
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
	b.ReportMetric(float64(b.N)/(cpuTime(b)-cpuBefore).Seconds(), "csr/cpu-s")
}

// cpuTime returns the CPU time the process has used, user and system, on every thread.
func cpuTime(b *testing.B) time.Duration {
	b.Helper()
	var u syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &u); err != nil {
		b.Fatal(err)
	}
	return time.Duration(u.Utime.Nano() + u.Stime.Nano())
}
