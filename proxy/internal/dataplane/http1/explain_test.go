package http1

import (
	"bytes"
	"errors"
	"net/netip"
	"net/url"
	"regexp"
	"strings"
	"testing"
)

// The allow-list of the request fuzz target (P3): the reasons for which ParseRequest may refuse
// what net/http accepts, each with a check, written apart from the parser, that the bytes hold
// what the reason says. docs/http1-engine.md lists the same refusals.

// rqHead is the start of a request as the checks see it: its lines up to the first empty one.
type rqHead struct {
	raw    string   // the bytes up to and including the first empty line, or all of them
	lines  []string // the lines of raw, LF and a CR before it removed
	method string
	target string
	proto  string
}

// rqSplitHead cuts in into lines at LF, up to the first empty line.
func rqSplitHead(in []byte) rqHead {
	var h rqHead
	rest := string(in)
	for rest != "" {
		line, after, found := strings.Cut(rest, "\n")
		h.raw += line
		if found {
			h.raw += "\n"
		}
		line = strings.TrimSuffix(line, "\r")
		if line == "" && len(h.lines) > 0 {
			break
		}
		h.lines = append(h.lines, line)
		rest = after
	}
	if len(h.lines) > 0 {
		words := strings.SplitN(h.lines[0], " ", 3)
		for len(words) < 3 {
			words = append(words, "")
		}
		h.method, h.target, h.proto = words[0], words[1], words[2]
	}
	return h
}

// fields returns the values of the field lines named name (case-insensitively), trimmed.
func (h rqHead) fields(name string) []string {
	var vs []string
	for _, l := range h.lines[min(1, len(h.lines)):] {
		n, v, ok := strings.Cut(l, ":")
		if ok && strings.EqualFold(n, name) {
			vs = append(vs, strings.Trim(v, " \t"))
		}
	}
	return vs
}

var (
	rqRegName   = regexp.MustCompile(`^[A-Za-z0-9\-._~!$&'()*+,;=]+(:[0-9]*)?$`)
	rqIPLiteral = regexp.MustCompile(`^\[([0-9A-Fa-f:.]+)\](:[0-9]*)?$`)
	rqDigits    = regexp.MustCompile(`^[0-9]+$`)
	rqAbsolute  = regexp.MustCompile(`(?i)^https?://([^/?]*)`)
	rqPort      = regexp.MustCompile(`:[0-9]+$`)
)

// rqHostBad reports a host that is neither a reg-name nor a bracketed IPv6 address, with an
// optional port (required when needPort is set).
func rqHostBad(h string, needPort bool) bool {
	if needPort && !rqPort.MatchString(h) {
		return true
	}
	if rqRegName.MatchString(h) {
		return false
	}
	m := rqIPLiteral.FindStringSubmatch(h)
	if m == nil {
		return true
	}
	a, err := netip.ParseAddr(m[1])
	return err != nil || !a.Is6() || a.Zone() != ""
}

// rqAuthority returns the authority of an absolute-form or CONNECT target.
func (h rqHead) authority() (string, bool) {
	if h.method == "CONNECT" {
		return h.target, true
	}
	if m := rqAbsolute.FindStringSubmatch(h.target); m != nil {
		return m[1], true
	}
	return "", false
}

// rqTargetBad reports a target outside the forms of its method or with a byte or escape a
// target may not hold.
func (h rqHead) targetBad() bool {
	t := h.target
	if strings.ContainsAny(t, "#") || strings.IndexFunc(t, func(r rune) bool { return r <= ' ' || r >= 0x7f }) >= 0 {
		return true
	}
	if _, err := url.PathUnescape(t); err != nil {
		return true
	}
	switch {
	case h.method == "CONNECT":
		// An authority, uri-host ":" port (RFC 9112 section 3.2.3), begins with neither: net/http
		// of Go 1.27 refuses "/..." and "*" alone but takes "*" followed by more.
		return strings.HasPrefix(t, "/") || strings.HasPrefix(t, "*")
	case t == "*":
		return h.method != "OPTIONS"
	case strings.HasPrefix(t, "/"):
		return false
	}
	return !rqAbsolute.MatchString(t)
}

// rqAllowed maps each allow-listed reason to its check.
var rqAllowed = map[string]func(in []byte, h rqHead) bool{
	ReasonBareLF: func(in []byte, h rqHead) bool {
		return regexp.MustCompile(`(^|[^\r])\n`).MatchString(h.raw)
	},
	ReasonRequestLine: func(in []byte, h rqHead) bool {
		return len(h.lines) == 0 || !regexp.MustCompile(`^[^ ]+ [^ ]+ [^ ]+$`).MatchString(h.lines[0])
	},
	ReasonEmptyLine: func(in []byte, h rqHead) bool { return len(in) > 0 && (in[0] == '\r' || in[0] == '\n') },
	ReasonObsFold: func(in []byte, h rqHead) bool {
		return regexp.MustCompile(`\n[ \t]`).MatchString(h.raw)
	},
	ReasonMethodCase: func(in []byte, h rqHead) bool {
		return regexp.MustCompile(`[a-z]`).MatchString(h.method)
	},
	ReasonTarget: func(in []byte, h rqHead) bool { return h.targetBad() },
	ReasonHost: func(in []byte, h rqHead) bool {
		a, ok := h.authority()
		hosts := h.fields("host")
		return ok && rqHostBad(a, h.method == "CONNECT") || len(hosts) == 1 && hosts[0] != "" && rqHostBad(hosts[0], false)
	},
	ReasonUserinfo: func(in []byte, h rqHead) bool {
		a, _ := h.authority()
		return strings.Contains(a, "@") || strings.Contains(strings.Join(h.fields("host"), ""), "@")
	},
	ReasonUnsupportedVersion: func(in []byte, h rqHead) bool {
		return regexp.MustCompile(`^HTTP/1\.[2-9]$`).MatchString(h.proto)
	},
	ReasonMissingHost: func(in []byte, h rqHead) bool { return len(h.fields("host")) == 0 },
	ReasonContentLength: func(in []byte, h rqHead) bool {
		for _, v := range h.fields("content-length") {
			if !rqDigits.MatchString(v) || len(strings.TrimLeft(v, "0")) > 19 {
				return true
			}
		}
		return false
	},
	ReasonDuplicateContentLength: func(in []byte, h rqHead) bool { return len(h.fields("content-length")) > 1 },
	ReasonContentLengthWithTransferEncoding: func(in []byte, h rqHead) bool {
		return len(h.fields("content-length")) > 0 && len(h.fields("transfer-encoding")) > 0
	},
	ReasonTransferEncodingHTTP10: func(in []byte, h rqHead) bool {
		return h.proto == "HTTP/1.0" && len(h.fields("transfer-encoding")) > 0
	},
	ReasonExpectation: func(in []byte, h rqHead) bool {
		n := 0
		for _, v := range h.fields("expect") {
			if v != "" {
				n++
			}
			if v != "" && !strings.EqualFold(v, "100-continue") {
				return true
			}
		}
		return n > 1
	},
	ReasonHeadTooLarge: func(in []byte, h rqHead) bool { return len(h.raw) > DefaultMaxHeaderBytes },
	ReasonTooManyFields: func(in []byte, h rqHead) bool {
		return len(h.lines)-1 > DefaultMaxHeaderCount
	},
	ReasonRequestLineTooLong: func(in []byte, h rqHead) bool {
		return len(h.lines) > 0 && len(h.lines[0]) > DefaultMaxRequestLine || !bytes.Contains(in[:min(len(in), DefaultMaxRequestLine+2)], []byte("\n"))
	},
}

// rqExplain fails unless a refusal of what net/http accepts is allow-listed and its check finds
// the reason in the bytes (P3).
func rqExplain(t *testing.T, in []byte, err error) {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("P3: refused with %v what net/http accepts: %q", err, in)
	}
	check, ok := rqAllowed[e.Reason]
	if !ok {
		t.Fatalf("P3: refused (%d %s) what net/http accepts, a reason not on the allow-list: %q", e.Status, e.Reason, in)
	}
	if !check(in, rqSplitHead(in)) {
		t.Fatalf("P3: refused (%s) what net/http accepts, and the bytes do not show it: %q", e.Reason, in)
	}
}
