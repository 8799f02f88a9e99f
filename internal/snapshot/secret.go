package snapshot

import (
	"encoding/json"
	"fmt"
)

const redacted = "[redacted]"

// SecretBytes holds private key material. Every way of printing or serialising it for humans
// (fmt verbs, JSON, YAML) yields "[redacted]", so logs and golden files never show a key; code
// that must ship the key converts it to []byte explicitly.
type SecretBytes []byte

// String implements fmt.Stringer.
func (SecretBytes) String() string { return redacted }

// GoString implements fmt.GoStringer.
func (SecretBytes) GoString() string { return redacted }

// Format implements fmt.Formatter so that no verb (%x, %d...) prints the bytes.
func (SecretBytes) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON implements json.Marshaler.
func (SecretBytes) MarshalJSON() ([]byte, error) { return json.Marshal(redacted) }

// MarshalYAML implements the yaml.Marshaler of go.yaml.in/yaml.
func (SecretBytes) MarshalYAML() (any, error) { return redacted, nil }

// MarshalText implements encoding.TextMarshaler.
func (SecretBytes) MarshalText() ([]byte, error) { return []byte(redacted), nil }
