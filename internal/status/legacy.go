package status

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Status written before it was applied server-side was patched under LegacyFieldManager, as an
// Update. The API server keeps that manager's ownership of every field it set and we did not
// change since, and never lets a status request rewrite managedFields; so a condition or
// listener we stop applying would stay, owned by our former self. prune removes those: what the
// stored status holds that we do not apply now, that LegacyFieldManager owns (all of it or a
// part) and that no other writer owns any part of.

// listMapKeys names the key of each list-map of the status we apply, by field name (see the
// CRDs: conditions by type, listeners by name, supportedFeatures by name).
var listMapKeys = map[string]string{"conditions": "type", "listeners": "name", "supportedFeatures": "name"}

// jsonPatchOp is one operation of a JSON patch (RFC 6902).
type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value,omitempty"`
}

// prune removes from the status of src, with a JSON patch guarded by its resourceVersion,
// whatever of it only LegacyFieldManager owns and ours, the status we are about to apply,
// lacks. On a conflict it re-reads the object and tries again. It says whether it removed
// anything.
func (w *Writer) prune(ctx context.Context, src client.Object, ours any) (bool, error) {
	if w.LegacyFieldManager == "" || w.LegacyFieldManager == FieldManager {
		return false, nil
	}
	obj := src
	pruned := false
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var err error
		pruned, err = w.pruneOnce(ctx, obj, ours)
		if apierrors.IsConflict(err) {
			fresh, ok := src.DeepCopyObject().(client.Object)
			if !ok {
				return fmt.Errorf("%T is not a client.Object", src)
			}
			if getErr := w.Reader.Get(ctx, client.ObjectKeyFromObject(src), fresh); getErr != nil {
				return getErr
			}
			obj = fresh
		}
		return err
	})
	return pruned, err
}

func (w *Writer) pruneOnce(ctx context.Context, src client.Object, ours any) (bool, error) {
	legacy, others, err := statusOwners(src.GetManagedFields(), w.LegacyFieldManager)
	if err != nil || len(legacy) == 0 {
		return false, err
	}
	have, err := statusOf(src)
	if err != nil {
		return false, err
	}
	want, err := runtime.DefaultUnstructuredConverter.ToUnstructured(ours)
	if err != nil {
		return false, fmt.Errorf("convert our status: %w", err)
	}
	p := pruner{legacy: legacy, others: others}
	p.walk("/status", []pathElement{{field: "status"}}, have, want)
	if len(p.ops) == 0 {
		return false, nil
	}
	// A resourceVersion that is no longer the object's fails the patch with a conflict.
	ops := append([]jsonPatchOp{{Op: "replace", Path: "/metadata/resourceVersion", Value: src.GetResourceVersion()}}, p.ops...)
	body, err := json.Marshal(ops)
	if err != nil {
		return false, err
	}
	obj, ok := src.DeepCopyObject().(client.Object)
	if !ok {
		return false, fmt.Errorf("%T is not a client.Object", src)
	}
	if err := w.Client.Status().Patch(ctx, obj, client.RawPatch(types.JSONPatchType, body), client.FieldOwner(FieldManager)); err != nil {
		return false, err
	}
	return true, nil
}

// statusOwners decodes the field sets of managed: those of the Update entries of legacy (none
// when it has none), and those of every manager but legacy and FieldManager.
func statusOwners(managed []metav1.ManagedFieldsEntry, legacy string) ([]fieldSet, []fieldSet, error) {
	var ours, others []fieldSet
	for _, m := range managed {
		if m.Manager == FieldManager || m.FieldsV1 == nil {
			continue
		}
		var set fieldSet
		if err := json.Unmarshal(m.FieldsV1.GetRawBytes(), &set); err != nil {
			return nil, nil, fmt.Errorf("decode the fields of %s: %w", m.Manager, err)
		}
		if m.Manager == legacy && m.Operation == metav1.ManagedFieldsOperationUpdate {
			ours = append(ours, set)
		} else {
			others = append(others, set)
		}
	}
	return ours, others, nil
}

// fieldSet is a managed field set in its FieldsV1 form: a tree whose keys are "f:<field>" for a
// field, "k:<key fields as JSON>" for an entry of a list-map, and "." for the entry itself. A
// manager owns a field or entry when the tree holds its path, as a leaf ({}) or with what it
// owns under it.
type fieldSet map[string]fieldSet

// pathElement is one step of a path in a fieldSet: a field name, or the key of a list-map entry.
type pathElement struct {
	field string
	key   map[string]any
}

// owns says whether the set holds path, itself or something under it.
func (s fieldSet) owns(path []pathElement) bool {
	node := s
	for _, pe := range path {
		next, ok := node.child(pe)
		if !ok {
			return false
		}
		node = next
	}
	return true
}

func (s fieldSet) child(pe pathElement) (fieldSet, bool) {
	if pe.key == nil {
		next, ok := s["f:"+pe.field]
		return next, ok
	}
	for k, next := range s {
		rest, ok := strings.CutPrefix(k, "k:")
		if !ok {
			continue
		}
		var key map[string]any
		if json.Unmarshal([]byte(rest), &key) == nil && maps.Equal(key, pe.key) {
			return next, true
		}
	}
	return nil, false
}

// statusOf returns the status of obj as unstructured content, nil when it has none.
func statusOf(obj client.Object) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, fmt.Errorf("convert %s: %w", client.ObjectKeyFromObject(obj), err)
	}
	st, _ := u["status"].(map[string]any)
	return st, nil
}

// pruner collects the removals of a status.
type pruner struct {
	legacy, others []fieldSet
	ops            []jsonPatchOp
}

// walk adds a removal of each field of have (at the JSON pointer ptr and the field path path)
// that want lacks and only the legacy manager owns, and descends into the fields and list-map
// entries both hold. Entries of a list are visited from the last, so that a removal leaves the
// indexes of those still to visit as they were.
func (p *pruner) walk(ptr string, path []pathElement, have, want map[string]any) {
	names := make([]string, 0, len(have))
	for name := range have {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		fieldPtr := ptr + "/" + escapePointer(name)
		fieldPath := append(slices.Clone(path), pathElement{field: name})
		w, ok := want[name]
		if !ok {
			p.remove(fieldPtr, fieldPath)
			continue
		}
		switch h := have[name].(type) {
		case map[string]any:
			if w, ok := w.(map[string]any); ok {
				p.walk(fieldPtr, fieldPath, h, w)
			}
		case []any:
			key, isMap := listMapKeys[name]
			w, ok := w.([]any)
			if !isMap || !ok {
				continue // an atomic list we apply whole
			}
			for i := len(h) - 1; i >= 0; i-- {
				entry, ok := h[i].(map[string]any)
				if !ok {
					continue
				}
				entryPtr := fieldPtr + "/" + strconv.Itoa(i)
				entryPath := append(slices.Clone(fieldPath), pathElement{key: map[string]any{key: entry[key]}})
				if match := entryWith(w, key, entry[key]); match != nil {
					p.walk(entryPtr, entryPath, entry, match)
				} else {
					p.remove(entryPtr, entryPath)
				}
			}
		}
	}
}

// remove adds the removal of the field at ptr when the legacy manager owns some of it and no
// other manager any.
func (p *pruner) remove(ptr string, path []pathElement) {
	owns := func(s fieldSet) bool { return s.owns(path) }
	if !slices.ContainsFunc(p.legacy, owns) || slices.ContainsFunc(p.others, owns) {
		return
	}
	p.ops = append(p.ops, jsonPatchOp{Op: "remove", Path: ptr})
}

// entryWith returns the entry of list whose key field is value, nil when there is none.
func entryWith(list []any, key string, value any) map[string]any {
	for _, e := range list {
		if m, ok := e.(map[string]any); ok && m[key] == value {
			return m
		}
	}
	return nil
}

// escapePointer escapes a name for a JSON pointer (RFC 6901).
func escapePointer(name string) string {
	return strings.ReplaceAll(strings.ReplaceAll(name, "~", "~0"), "/", "~1")
}

// ProcessFieldManager returns the field manager the API server records this process's writes
// under when they name none: the first part of client-go's default user agent, the name of the
// executable. Our status patches were recorded so before they were applied as FieldManager.
func ProcessFieldManager() string {
	return strings.Split(rest.DefaultKubernetesUserAgent(), "/")[0]
}
