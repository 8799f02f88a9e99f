package pod

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"coxswain.dev/coxswain/hack/nodeagent/internal/sandbox"
	"coxswain.dev/coxswain/hack/nodeagent/internal/volume"
)

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// env resolves a container's environment: the image's (imageEnv; a default PATH when nil, for a
// mapped binary), HOSTNAME, then envFrom, then env, each value expanded against what came
// before ($(NAME), $$ for a dollar sign); a container's variable replaces the image's of the
// same name.
func (w *worker) env(ctx context.Context, pod *corev1.Pod, c *corev1.Container, imageEnv []string) ([]string, error) {
	vars := map[string]string{}
	var order []string
	set := func(k, v string) {
		if _, ok := vars[k]; !ok {
			order = append(order, k)
		}
		vars[k] = v
	}
	if imageEnv == nil {
		imageEnv = []string{"PATH=" + defaultPath}
	}
	for _, kv := range imageEnv {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	set("HOSTNAME", hostname(pod))
	if host, port, err := net.SplitHostPort(w.c.cfg.APIServer); err == nil {
		set("KUBERNETES_SERVICE_HOST", host)
		set("KUBERNETES_SERVICE_PORT", port)
	}
	for _, from := range c.EnvFrom {
		data, err := w.envFrom(ctx, pod.Namespace, from)
		if err != nil {
			return nil, err
		}
		for k, v := range data {
			set(from.Prefix+k, v)
		}
	}
	for _, e := range c.Env {
		v, err := w.envValue(ctx, pod, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		if e.ValueFrom == nil {
			v = expand(v, vars)
		}
		set(e.Name, v)
	}
	env := make([]string, 0, len(order))
	for _, k := range order {
		env = append(env, k+"="+vars[k])
	}
	return env, nil
}

func (w *worker) envValue(ctx context.Context, pod *corev1.Pod, e corev1.EnvVar) (string, error) {
	src := e.ValueFrom
	if src == nil {
		return e.Value, nil
	}
	switch {
	case src.FieldRef != nil:
		if src.FieldRef.FieldPath == "status.podIP" || src.FieldRef.FieldPath == "status.podIPs" {
			w.mu.Lock()
			defer w.mu.Unlock()
			if w.sb != nil {
				return w.sb.IP.String(), nil
			}
		}
		if src.FieldRef.FieldPath == "status.hostIP" {
			return w.c.cfg.Network.Gateway().String(), nil
		}
		return volume.FieldRef(pod, src.FieldRef.FieldPath)
	case src.SecretKeyRef != nil:
		ref := src.SecretKeyRef
		sec, err := w.c.client.CoreV1().Secrets(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return optional(ref.Optional, fmt.Errorf("get secret %s: %w", ref.Name, err))
		}
		v, ok := sec.Data[ref.Key]
		if !ok {
			return optional(ref.Optional, fmt.Errorf("%w: secret %s has no key %s", errMissingKey, ref.Name, ref.Key))
		}
		return string(v), nil
	case src.ConfigMapKeyRef != nil:
		ref := src.ConfigMapKeyRef
		cm, err := w.c.client.CoreV1().ConfigMaps(pod.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
		if err != nil {
			return optional(ref.Optional, fmt.Errorf("get configmap %s: %w", ref.Name, err))
		}
		v, ok := cm.Data[ref.Key]
		if !ok {
			return optional(ref.Optional, fmt.Errorf("%w: configmap %s has no key %s", errMissingKey, ref.Name, ref.Key))
		}
		return v, nil
	}
	return "", fmt.Errorf("unsupported valueFrom (only fieldRef, secretKeyRef and configMapKeyRef)")
}

var errMissingKey = errors.New("missing key")

// optional forgives err when the reference is optional and what it names is missing.
func optional(opt *bool, err error) (string, error) {
	if opt != nil && *opt && (apierrors.IsNotFound(err) || errors.Is(err, errMissingKey)) {
		return "", nil
	}
	return "", err
}

func (w *worker) envFrom(ctx context.Context, ns string, from corev1.EnvFromSource) (map[string]string, error) {
	out := map[string]string{}
	switch {
	case from.SecretRef != nil:
		sec, err := w.c.client.CoreV1().Secrets(ns).Get(ctx, from.SecretRef.Name, metav1.GetOptions{})
		if err != nil {
			if _, oerr := optional(from.SecretRef.Optional, err); oerr == nil {
				return out, nil
			}
			return nil, fmt.Errorf("envFrom secret %s: %w", from.SecretRef.Name, err)
		}
		for k, v := range sec.Data {
			out[k] = string(v)
		}
	case from.ConfigMapRef != nil:
		cm, err := w.c.client.CoreV1().ConfigMaps(ns).Get(ctx, from.ConfigMapRef.Name, metav1.GetOptions{})
		if err != nil {
			if _, oerr := optional(from.ConfigMapRef.Optional, err); oerr == nil {
				return out, nil
			}
			return nil, fmt.Errorf("envFrom configmap %s: %w", from.ConfigMapRef.Name, err)
		}
		for k, v := range cm.Data {
			out[k] = v
		}
	}
	return out, nil
}

// expandAll expands $(NAME) references in args against env, as the kubelet does for command
// and args.
func expandAll(args, env []string) []string {
	vars := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	out := make([]string, len(args))
	for i, a := range args {
		out[i] = expand(a, vars)
	}
	return out
}

// expand replaces $(NAME) with its value when NAME is defined and $$ with $; anything else
// stays as written.
func expand(s string, vars map[string]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := vars[name]; ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// mounts are a container's volume mounts as bind mounts of the pod's volume directories.
// Secret, ConfigMap, downward API and projected volumes are always read-only, as the kubelet
// mounts them.
func (w *worker) mounts(pod *corev1.Pod, c *corev1.Container) []sandbox.Mount {
	readOnly := map[string]bool{}
	for _, v := range pod.Spec.Volumes {
		readOnly[v.Name] = v.Secret != nil || v.ConfigMap != nil || v.DownwardAPI != nil || v.Projected != nil
	}
	out := make([]sandbox.Mount, 0, len(c.VolumeMounts))
	for _, m := range c.VolumeMounts {
		out = append(out, sandbox.Mount{
			Source:   filepath.Join(w.vols.Path(m.Name), m.SubPath),
			Target:   m.MountPath,
			ReadOnly: m.ReadOnly || readOnly[m.Name],
		})
	}
	return out
}
