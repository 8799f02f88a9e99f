package admin

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
)

// Bounds of a bearer token, in bytes once the surrounding white space is trimmed. The lower one
// keeps a guessable token out: 32 random bytes in base64 or hex are 44 or 64 characters.
const (
	MinTokenBytes = 32
	maxTokenBytes = 4096
)

// ErrNotLoopback reports an admin address off the loopback without a token to guard it.
var ErrNotLoopback = errors.New("the admin address is not a loopback address, and no --admin-token-file guards it: the admin port shows the routing snapshot (every route, backend and certificate of the proxy's scope), so off the loopback it needs a bearer token")

// CheckAddress refuses an admin address whose host is not a loopback IP address or
// "localhost" when no token guards it. An empty host is every interface; any other host name
// may resolve anywhere.
func CheckAddress(address string, guarded bool) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return fmt.Errorf("admin address %q: %w", address, err)
	}
	if guarded || host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip != nil && ip.IsLoopback() {
		return nil
	}
	return fmt.Errorf("admin address %q: %w", address, ErrNotLoopback)
}

// tokenFile is a bearer token kept in a file (a mounted Secret), read again at every request so
// that a rotated Secret takes effect without a restart; a file of a few bytes costs little.
type tokenFile string

// read returns the token, white space trimmed, or why it is unusable.
func (path tokenFile) read() ([]byte, error) {
	f, err := os.Open(string(path))
	if err != nil {
		return nil, fmt.Errorf("read admin token: %w", err)
	}
	defer func() { _ = f.Close() }()
	b, err := io.ReadAll(io.LimitReader(f, maxTokenBytes+1))
	if err != nil {
		return nil, fmt.Errorf("read admin token %s: %w", path, err)
	}
	b = bytes.TrimSpace(b)
	switch {
	case len(b) > maxTokenBytes:
		return nil, fmt.Errorf("admin token %s is longer than %d bytes", path, maxTokenBytes)
	case len(b) < MinTokenBytes:
		return nil, fmt.Errorf("admin token %s is shorter than %d bytes: make one with `head -c 32 /dev/urandom | base64`", path, MinTokenBytes)
	}
	return b, nil
}

// authorized reports whether r carries "Authorization: Bearer <token>" with the file's token.
// Both sides are hashed before the constant-time comparison, so that neither the time taken
// nor an early return tells the token's length.
func (path tokenFile) authorized(r *http.Request) (bool, error) {
	want, err := path.read()
	if err != nil {
		return false, err
	}
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false, nil
	}
	a, b := sha256.Sum256([]byte(strings.TrimSpace(got))), sha256.Sum256(want)
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1, nil
}

// localHost reports whether the Host a request names is "localhost" or an IP address. Without
// a token, that keeps a web page out that a browser reaches through a port-forward by pointing
// a name of its own at 127.0.0.1 (DNS rebinding): the browser sends that name as the Host.
func localHost(r *http.Request) bool {
	host := r.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	return strings.EqualFold(host, "localhost") || net.ParseIP(host) != nil
}
