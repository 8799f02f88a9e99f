package accesslog

import (
	"fmt"
	"strings"
)

// Format is the form of a line.
type Format uint8

// The formats: one JSON object a line, or key=value pairs (logfmt) a line.
const (
	FormatJSON Format = iota
	FormatText
)

// ParseFormat returns the format named "json" or "text".
func ParseFormat(s string) (Format, error) {
	switch s {
	case "json":
		return FormatJSON, nil
	case "text":
		return FormatText, nil
	}
	return 0, fmt.Errorf("access log format %q: want json or text", s)
}

// Field is one field of a line.
type Field uint8

// The fields, in the order of AllFields.
const (
	FieldTime Field = iota
	FieldRequestID
	FieldClientAddress
	FieldClientPort
	FieldProtocol
	FieldTLSVersion
	FieldSNI
	FieldGateway
	FieldListener
	FieldHost
	FieldMethod
	FieldPath
	FieldRoute
	FieldRule
	FieldStatus
	FieldReason
	FieldUpstream
	FieldUpstreamStatus
	FieldRetries
	FieldBytesIn
	FieldBytesOut
	FieldDuration
	FieldUpstreamConnect
	FieldTTFB
	fieldCount
)

// fieldNames are the fields' keys in a line, which the --access-log-fields flag takes.
var fieldNames = [fieldCount]string{
	FieldTime:            "time",
	FieldRequestID:       "requestID",
	FieldClientAddress:   "clientAddress",
	FieldClientPort:      "clientPort",
	FieldProtocol:        "protocol",
	FieldTLSVersion:      "tlsVersion",
	FieldSNI:             "sni",
	FieldGateway:         "gateway",
	FieldListener:        "listener",
	FieldHost:            "host",
	FieldMethod:          "method",
	FieldPath:            "path",
	FieldRoute:           "route",
	FieldRule:            "rule",
	FieldStatus:          "status",
	FieldReason:          "reason",
	FieldUpstream:        "upstream",
	FieldUpstreamStatus:  "upstreamStatus",
	FieldRetries:         "retries",
	FieldBytesIn:         "bytesIn",
	FieldBytesOut:        "bytesOut",
	FieldDuration:        "durationMs",
	FieldUpstreamConnect: "upstreamConnectMs",
	FieldTTFB:            "ttfbMs",
}

// String returns the field's key.
func (f Field) String() string {
	if f < fieldCount {
		return fieldNames[f]
	}
	return fmt.Sprintf("Field(%d)", uint8(f))
}

// AllFields returns every field, in the order lines have them by default.
func AllFields() []Field {
	out := make([]Field, fieldCount)
	for i := range out {
		out[i] = Field(i)
	}
	return out
}

// FieldNames returns the keys of every field, in AllFields order.
func FieldNames() []string { return append([]string(nil), fieldNames[:]...) }

// ParseFields returns the fields a comma-separated list of keys names, in its order; "" or
// "all" is every field. A key named twice, or one that is no field, is an error.
func ParseFields(s string) ([]Field, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return AllFields(), nil
	}
	var out []Field
	seen := map[Field]bool{}
	for name := range strings.SplitSeq(s, ",") {
		name = strings.TrimSpace(name)
		f, ok := fieldByName(name)
		switch {
		case !ok:
			return nil, fmt.Errorf("access log field %q: want one of %s", name, strings.Join(fieldNames[:], ", "))
		case seen[f]:
			return nil, fmt.Errorf("access log field %q named twice", name)
		}
		seen[f] = true
		out = append(out, f)
	}
	return out, nil
}

func fieldByName(name string) (Field, bool) {
	for i, n := range fieldNames {
		if n == name {
			return Field(i), true
		}
	}
	return 0, false
}
