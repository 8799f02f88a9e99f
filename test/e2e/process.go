package e2e

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"
)

// Process is a child process of the suite. It runs in its own process group, gets SIGKILL
// when the thread that started it dies, and writes its output to a log file.
type Process struct {
	Name    string
	LogPath string
	Started time.Time
	cmd     *exec.Cmd
	done    chan struct{}
	err     error
	ended   time.Time
}

// StartProcess runs path with args, extra added to the environment, output to logPath.
func StartProcess(name, logPath, path string, args, extra []string) (*Process, error) {
	log, err := os.Create(logPath) //nolint:gosec // a file in the test's temporary directory
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	cmd := exec.Command(path, args...) //nolint:gosec,noctx // the binaries under test; stopped by Kill and Stop
	cmd.Env = append(os.Environ(), extra...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		_ = log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &Process{Name: name, LogPath: logPath, Started: time.Now(), cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		p.ended = time.Now()
		_ = log.Close()
		close(p.done)
	}()
	return p, nil
}

// Pid returns the process ID.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Ended returns nil while the process runs, and an error saying how it ended afterwards.
func (p *Process) Ended() error {
	select {
	case <-p.done:
		if p.err == nil {
			return fmt.Errorf("%s exited with status 0", p.Name)
		}
		return fmt.Errorf("%s ended: %w", p.Name, p.err)
	default:
		return nil
	}
}

// RanDuring reports whether the process was running at some time between from and to.
func (p *Process) RanDuring(from, to time.Time) bool {
	if p.Started.After(to) {
		return false
	}
	select {
	case <-p.done:
		return !p.ended.Before(from)
	default:
		return true
	}
}

// Kill sends SIGKILL to the process group and waits for the process to end.
func (p *Process) Kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) // ESRCH: already gone
	<-p.done
}

// Stop sends SIGTERM and waits up to grace for the process to end, then kills it. It returns
// the process's error when it ended on its own with a failure.
func (p *Process) Stop(grace time.Duration) error {
	select {
	case <-p.done:
		return exitError(p.Name, p.err)
	default:
	}
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM) // ESRCH: already gone
	select {
	case <-p.done:
		return exitError(p.Name, p.err)
	case <-time.After(grace):
		p.Kill()
		return fmt.Errorf("%s did not stop within %s of SIGTERM", p.Name, grace)
	}
}

func exitError(name string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%s exited: %w", name, err)
}

// Log returns the process's output so far.
func (p *Process) Log() string {
	data, err := os.ReadFile(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(read log of %s: %v)", p.Name, err)
	}
	return string(data)
}

// LogContains reports whether the output so far contains s.
func (p *Process) LogContains(s string) bool { return strings.Contains(p.Log(), s) }

// LogTail returns the last max bytes of the output, starting at a line.
func (p *Process) LogTail(maxBytes int64) string {
	f, err := os.Open(p.LogPath)
	if err != nil {
		return fmt.Sprintf("(open log of %s: %v)", p.Name, err)
	}
	defer f.Close() //nolint:errcheck // read only
	info, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(stat log of %s: %v)", p.Name, err)
	}
	offset := max(info.Size()-maxBytes, 0)
	data, err := io.ReadAll(io.NewSectionReader(f, offset, info.Size()-offset))
	if err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(read log of %s: %v)", p.Name, err)
	}
	s := string(data)
	if offset > 0 {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = fmt.Sprintf("(%d bytes before this)\n%s", offset+int64(i)+1, s[i+1:])
		}
	}
	return s
}
