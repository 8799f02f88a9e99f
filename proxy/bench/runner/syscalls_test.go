package main

import (
	"os"
	"strings"
	"testing"
)

// straceSample is strace -f -qq -y -e signal=none -s 0 output of the data plane under wrk,
// trimmed: calls interrupted by other threads, padded results, a restart, the runtime's
// eventfd wake-up, a call still unfinished when strace detached, and nginx's lines, which
// carry no thread id.
const straceSample = `20242 read(14<socket:[1849014]>,  <unfinished ...>
20243 read(13<socket:[1849015]>,  <unfinished ...>
20242 <... read resumed>0x205769dec000, 32768) = -1 EAGAIN (Resource temporarily unavailable)
20243 <... read resumed>""..., 4096)    = 55
20242 write(16<socket:[1849016]>, ""..., 108)             = 108
20398 write(17<TCP:[127.0.0.1:18081->127.0.0.1:52366]>,  <unfinished ...>
20398 <... write resumed>)              = 203
20357 read(11<socket:[1849017]>, 0x205769de7000, 4096)    = -1 EAGAIN (Resource temporarily unavailable)
20242 read(13<socket:[1849015]>, ""..., 14)               = 14
20349 write(7<anon_inode:[eventfd]>, ""..., 8 <unfinished ...>
20349 <... write resumed>)              = 8
20241 nanosleep({tv_sec=0, tv_nsec=20000},  <unfinished ...>
20241 <... nanosleep resumed>NULL)      = 0
20241 restart_syscall(<... resuming interrupted read ...> <unfinished ...>
20241 <... restart_syscall resumed>)    = 0
20242 accept4(5<socket:[1849000]>,  <unfinished ...>
20242 <... accept4 resumed>{sa_family=AF_INET, sin_port=htons(52366), sin_addr=inet_addr("127.0.0.1")}, [112 => 16], SOCK_CLOEXEC|SOCK_NONBLOCK) = 8
20243 futex(0x11bb398, FUTEX_WAIT_PRIVATE, 0, NULL <unfinished ...>
writev(3<socket:[1849020]>, [{iov_base=""..., iov_len=155}, {iov_base=""..., iov_len=100}], 2) = 255
recvfrom(3<socket:[1849020]>, ""..., 1024, 0, NULL, NULL) = 78
`

func TestParseStrace(t *testing.T) {
	tally, err := parseStrace(strings.NewReader(straceSample))
	if err != nil {
		t.Fatal(err)
	}
	if tally.writes != 3 || tally.reads != 5 || tally.eagain != 2 {
		t.Errorf("socket writes %d, reads %d, EAGAIN %d; want 3, 5, 2", tally.writes, tally.reads, tally.eagain)
	}
	want := map[string]int{"write (not a socket)": 1, "nanosleep": 1, "restart_syscall": 1, "accept4": 1}
	if len(tally.other) != len(want) {
		t.Errorf("other calls = %v, want %v", tally.other, want)
	}
	for name, n := range want {
		if tally.other[name] != n {
			t.Errorf("%s: %d calls, want %d (all: %v)", name, tally.other[name], n, tally.other)
		}
	}
}

func TestCountSyscalls(t *testing.T) {
	path := t.TempDir() + "/strace.txt"
	writeFile(t, path, straceSample)
	c, err := countSyscalls(path, 2)
	if err != nil {
		t.Fatal(err)
	}
	if c.writes != 1.5 || c.reads != 2.5 || c.eagain != 1 || c.other != 2 || c.total() != 6 {
		t.Errorf("counts = %+v, want writes 1.5, reads 2.5, EAGAIN 1, other 2, total 6", c)
	}
	if c.top != "accept4 0.50, nanosleep 0.50, restart_syscall 0.50" {
		t.Errorf("top = %q", c.top)
	}
}

// A trace without a write to a socket measured nothing: no figure.
func TestCountSyscallsRefusesTraceWithoutSocketWrites(t *testing.T) {
	path := t.TempDir() + "/strace.txt"
	writeFile(t, path, "20241 nanosleep({tv_sec=0, tv_nsec=20000}, NULL) = 0\n20349 write(7<anon_inode:[eventfd]>, \"\"..., 8) = 8\n")
	if _, err := countSyscalls(path, 100); err == nil {
		t.Fatal("countSyscalls accepted a trace without a single write to a socket")
	}
}

func writeFile(t *testing.T, path, text string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
}
