package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Tests that the stand-in refuses a missing Corefile, and otherwise runs until SIGTERM and
// then exits cleanly, as a pod's container must.
func TestStubRunsUntilSIGTERM(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "coredns-stub")
	build := exec.CommandContext(t.Context(), "go", "build", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}

	if out, err := exec.CommandContext(t.Context(), bin, "-conf", filepath.Join(dir, "missing")).CombinedOutput(); err == nil {
		t.Fatalf("a missing Corefile was accepted: %s", out)
	}

	conf := filepath.Join(dir, "Corefile")
	if err := os.WriteFile(conf, []byte(".:53 {\n}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd := exec.CommandContext(t.Context(), bin, "-conf", conf)
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		t.Fatalf("the stub exited on its own: %v\n%s", err, stderr.String())
	case <-time.After(300 * time.Millisecond):
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stub did not exit within 10s of SIGTERM")
	}
	if !strings.Contains(stderr.String(), "answering no queries") {
		t.Errorf("the stub did not say what it is: %q", stderr.String())
	}
}
