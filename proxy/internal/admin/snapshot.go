package admin

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/known/anypb"

	"coxswain.dev/coxswain/discovery/server/cache"
)

// errNoSuchResource reports a resource key the applied set does not hold.
var errNoSuchResource = errors.New("no such resource")

// snapshotView is the JSON of GET /snapshot.
type snapshotView struct {
	// Version is the version the controller gave the set: its content hash.
	Version string `json:"version"`
	// Hash is the SHA-256 content hash of the resources held, computed as the controller
	// computes versions: equal to Version, since the agent refuses a set whose hash is not its
	// version.
	Hash      string    `json:"hash"`
	AppliedAt time.Time `json:"appliedAt"`
	// ResourceCount counts the set's resources, all of them even when one is asked for.
	ResourceCount int            `json:"resourceCount"`
	Resources     []resourceView `json:"resources"`
}

// resourceView is one resource: its key, its payload's type and the payload in protojson,
// secrets redacted; or, when the payload cannot be shown, why.
type resourceView struct {
	Key   string          `json:"key"`
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value,omitempty"`
	Error string          `json:"error,omitempty"`
}

// renderSnapshot returns the JSON of a, or of its resource key alone when key is not empty.
func renderSnapshot(a *Applied, key string) ([]byte, error) {
	hashed, err := cache.NewSnapshot(a.Set.Resources(), time.Time{})
	if err != nil {
		return nil, fmt.Errorf("hash the applied set: %w", err)
	}
	v := snapshotView{
		Version: a.Set.Version(), Hash: hashed.Version(), AppliedAt: a.At.UTC(),
		ResourceCount: a.Set.Len(), Resources: []resourceView{},
	}
	for k, payload := range a.Set.All() {
		if key == "" || k == key {
			v.Resources = append(v.Resources, viewResource(k, payload))
		}
	}
	if key != "" && len(v.Resources) == 0 {
		return nil, fmt.Errorf("%w %q in version %s", errNoSuchResource, key, a.Set.Version())
	}
	return json.MarshalIndent(v, "", "  ")
}

// viewResource renders one payload, redacted. It never shows the bytes of a payload it cannot
// decode or redact: who knows what they hold.
func viewResource(key string, payload *anypb.Any) resourceView {
	url := payload.GetTypeUrl()
	v := resourceView{Key: key, Type: url[strings.LastIndexByte(url, '/')+1:]}
	msg, err := payload.UnmarshalNew()
	switch {
	case errors.Is(err, protoregistry.NotFound):
		v.Error = "not shown: the type is unknown to this proxy"
		return v
	case err != nil:
		v.Error = "not shown: the payload does not decode"
		return v
	}
	redact(msg.ProtoReflect(), false)
	b, err := protojson.Marshal(msg)
	if err != nil {
		v.Error = "not shown: the payload does not encode as JSON"
		return v
	}
	v.Value = bytes.ReplaceAll(b, redactedJSON, redactedText)
	return v
}
