package accesslog

import (
	"crypto/tls"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// encoder writes the selected fields of entries in one format, without reflection.
type encoder struct {
	format Format
	fields []Field
}

// value is one field of an entry: a string, a number, or nothing (JSON null, text "-").
type value struct {
	kind valueKind
	s    string
	n    int64
	ms   time.Duration
}

type valueKind uint8

const (
	kindNone valueKind = iota
	kindString
	kindInt
	kindMillis
	kindTime
)

func (enc *encoder) append(b []byte, e *Entry) []byte {
	if enc.format == FormatJSON {
		b = append(b, '{')
	}
	for i, f := range enc.fields {
		if i > 0 {
			if enc.format == FormatJSON {
				b = append(b, ',')
			} else {
				b = append(b, ' ')
			}
		}
		v := fieldValue(e, f)
		if enc.format == FormatJSON {
			b = append(b, '"')
			b = append(b, fieldNames[f]...)
			b = append(b, '"', ':')
			b = appendJSON(b, e, v)
		} else {
			b = append(b, fieldNames[f]...)
			b = append(b, '=')
			b = appendText(b, e, v)
		}
	}
	if enc.format == FormatJSON {
		b = append(b, '}')
	}
	return append(b, '\n')
}

func str(s string) value { return value{kind: kindString, s: s} }

func num(n int64) value { return value{kind: kindInt, n: n} }

// measured is a duration, or nothing when zero (not measured).
func measured(d time.Duration) value {
	if d == 0 {
		return value{}
	}
	return value{kind: kindMillis, ms: d}
}

func fieldValue(e *Entry, f Field) value {
	switch f {
	case FieldTime:
		return value{kind: kindTime}
	case FieldRequestID:
		return str(e.RequestID)
	case FieldClientAddress:
		host, _ := splitAddr(e.ClientAddr)
		return str(host)
	case FieldClientPort:
		if _, port := splitAddr(e.ClientAddr); port >= 0 {
			return num(port)
		}
		return value{}
	case FieldProtocol:
		return str(e.Protocol)
	case FieldTLSVersion:
		return str(tlsVersion(e.TLSVersion))
	case FieldSNI:
		return str(e.SNI)
	case FieldGateway:
		return str(gatewayOf(e.Listener))
	case FieldListener:
		return str(e.GatewayListener)
	case FieldHost:
		return str(e.Host)
	case FieldMethod:
		return str(e.Method)
	case FieldPath:
		return str(e.Path)
	case FieldRoute:
		route, _ := splitRoute(e.Route)
		return str(route)
	case FieldRule:
		_, rule := splitRoute(e.Route)
		return str(rule)
	case FieldStatus:
		return num(int64(e.Status))
	case FieldReason:
		return str(e.Reason)
	case FieldUpstream:
		return str(e.Upstream)
	case FieldUpstreamStatus:
		if e.UpstreamStatus == 0 {
			return value{}
		}
		return num(int64(e.UpstreamStatus))
	case FieldRetries:
		return num(int64(e.Retries))
	case FieldBytesIn:
		return num(e.BytesIn)
	case FieldBytesOut:
		return num(e.BytesOut)
	case FieldDuration:
		return value{kind: kindMillis, ms: e.Duration}
	case FieldUpstreamConnect:
		return measured(e.UpstreamConnect)
	case FieldTTFB:
		return measured(e.TTFB)
	}
	return value{}
}

func appendJSON(b []byte, e *Entry, v value) []byte {
	switch v.kind {
	case kindString:
		return appendString(b, v.s)
	case kindInt:
		return strconv.AppendInt(b, v.n, 10)
	case kindMillis:
		return appendMillis(b, v.ms)
	case kindTime:
		b = append(b, '"')
		b = e.Start.UTC().AppendFormat(b, time.RFC3339Nano)
		return append(b, '"')
	}
	return append(b, "null"...)
}

// appendText appends v as a logfmt value: bare when it holds only printable ASCII other than
// space, '"' and '=', quoted and escaped as a JSON string otherwise, "-" when empty or absent.
func appendText(b []byte, e *Entry, v value) []byte {
	switch v.kind {
	case kindString:
		if v.s == "" {
			return append(b, '-')
		}
		if bare(v.s) {
			return append(b, v.s...)
		}
		return appendString(b, v.s)
	case kindInt:
		return strconv.AppendInt(b, v.n, 10)
	case kindMillis:
		return appendMillis(b, v.ms)
	case kindTime:
		return e.Start.UTC().AppendFormat(b, time.RFC3339Nano)
	}
	return append(b, '-')
}

func bare(s string) bool {
	for i := range len(s) {
		if c := s[i]; c <= ' ' || c >= 0x7f || c == '"' || c == '=' || c == '\\' {
			return false
		}
	}
	return s != "-"
}

func appendMillis(b []byte, d time.Duration) []byte {
	return strconv.AppendFloat(b, float64(d.Microseconds())/1000, 'f', 3, 64)
}

// splitAddr splits "host:port" or "[v6]:port"; port is -1 when there is none.
func splitAddr(addr string) (string, int64) {
	i := strings.LastIndexByte(addr, ':')
	if i < 0 || strings.IndexByte(addr[i:], ']') >= 0 {
		return strings.Trim(addr, "[]"), -1
	}
	port, err := strconv.ParseUint(addr[i+1:], 10, 16)
	if err != nil {
		return strings.Trim(addr, "[]"), -1
	}
	return strings.Trim(addr[:i], "[]"), int64(port)
}

// gatewayOf returns "<namespace>/<gateway>" of a Listener resource's name
// "<namespace>/<gateway>/<port>".
func gatewayOf(listener string) string {
	if i := strings.LastIndexByte(listener, '/'); i > 0 {
		return listener[:i]
	}
	return listener
}

// splitRoute returns "<namespace>/<route>" and the rule of a route's name
// "<namespace>/<route>/<rule>/<match>".
func splitRoute(name string) (route, rule string) {
	i := strings.LastIndexByte(name, '/')
	if i < 0 {
		return name, ""
	}
	j := strings.LastIndexByte(name[:i], '/')
	if j < 0 {
		return name, ""
	}
	return name[:j], name[j+1 : i]
}

func tlsVersion(v uint16) string {
	switch v {
	case 0:
		return ""
	case tls.VersionTLS10:
		return "TLSv1.0"
	case tls.VersionTLS11:
		return "TLSv1.1"
	case tls.VersionTLS12:
		return "TLSv1.2"
	case tls.VersionTLS13:
		return "TLSv1.3"
	}
	return "unknown"
}

const hex = "0123456789abcdef"

// appendString appends s as a JSON string, escaping quotes, backslashes and control
// characters and replacing invalid UTF-8.
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); {
		c := s[i]
		if c >= utf8.RuneSelf {
			r, size := utf8.DecodeRuneInString(s[i:])
			if r == utf8.RuneError && size == 1 {
				b = append(b, `\ufffd`...)
			} else {
				b = append(b, s[i:i+size]...)
			}
			i += size
			continue
		}
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < ' ' || c == 0x7f:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
		i++
	}
	return append(b, '"')
}
