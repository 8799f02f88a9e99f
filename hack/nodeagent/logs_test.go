package main

import (
	"bufio"
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

const logsNamespace = "agent-logs"

// Tests that container logs reach clients through the API server (pods/log, as kubectl logs
// reads them): every line with its time, selected by sinceTime and tailLines, the previous
// run's log after a restart, and a follower receiving a line written later; and that the
// kubelet API refuses clients without a certificate of the cluster CA or without the right.
func TestContainerLogsThroughTheAPIServer(t *testing.T) {
	ctx := t.Context()
	c := getCluster(t)
	poll(t, "the Node publishing kubelet port 10250", 30*time.Second, func() (bool, error) {
		node, err := c.client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		port := node.Status.DaemonEndpoints.KubeletEndpoint.Port
		return port == 10250, fmt.Errorf("port %d", port)
	})
	ensureNamespace(ctx, t, c, logsNamespace)
	pod := barePod("logger", corev1.RestartPolicyAlways)
	pod.Namespace = logsNamespace
	createPod(t, c, pod)
	ip := waitPodReady(t, c, logsNamespace, "logger", 0)
	say := func(stream, text string) {
		t.Helper()
		get(t, ip, "/log?stream="+stream+"&text="+url.QueryEscape(text))
	}
	// Lines of the two streams are ordered by when the agent reads them, each pipe by its own
	// reader, as a container runtime orders them: a line is waited for in the log before the
	// other stream writes, so that the order below is the order written.
	logged := func(want string) {
		t.Helper()
		poll(t, fmt.Sprintf("the log to read %q", want), 10*time.Second, func() (bool, error) {
			got := podLogs(t, c, "logger", &corev1.PodLogOptions{})
			return got == want, fmt.Errorf("log %q", got)
		})
	}

	say("stdout", "first\n")
	logged("first\n")
	say("stderr", "second, on stderr\n")
	logged("first\nsecond, on stderr\n")
	say("stdout", "a line in ") // its end comes with the next write
	say("stdout", "two writes\n")
	// sinceTime has a resolution of a second: the next line comes in a later second.
	since := time.Now().Truncate(time.Second).Add(time.Second)
	time.Sleep(time.Until(since) + 50*time.Millisecond)
	say("stdout", "late\n")

	all := podLogs(t, c, "logger", &corev1.PodLogOptions{})
	if want := "first\nsecond, on stderr\na line in two writes\nlate\n"; all != want {
		t.Errorf("pods/log = %q, want %q", all, want)
	}
	stamped := podLogs(t, c, "logger", &corev1.PodLogOptions{Timestamps: true})
	lines := strings.Split(strings.TrimSuffix(stamped, "\n"), "\n")
	for i, line := range lines {
		stamp, text, _ := strings.Cut(line, " ")
		at, err := time.Parse(time.RFC3339Nano, stamp)
		if err != nil || time.Since(at) > time.Minute || time.Until(at) > time.Second {
			t.Errorf("line %d %q: no recent RFC3339Nano timestamp (%v)", i, line, err)
		}
		if want := strings.Split(all, "\n")[i]; text != want {
			t.Errorf("line %d with timestamps reads %q, want %q", i, text, want)
		}
	}
	if got := podLogs(t, c, "logger", &corev1.PodLogOptions{SinceTime: &metav1.Time{Time: since}}); got != "late\n" {
		t.Errorf("pods/log sinceTime=%s = %q, want only the late line", since.Format(time.RFC3339), got)
	}
	if got := podLogs(t, c, "logger", &corev1.PodLogOptions{TailLines: ptr.To[int64](2)}); got != "a line in two writes\nlate\n" {
		t.Errorf("pods/log tailLines=2 = %q", got)
	}
	if got := podLogs(t, c, "logger", &corev1.PodLogOptions{LimitBytes: ptr.To[int64](3)}); got != "fir" {
		t.Errorf("pods/log limitBytes=3 = %q", got)
	}
	t.Logf("pods/log with timestamps, sinceTime, tailLines and limitBytes: %d lines", len(lines))

	checkFollow(ctx, t, c, say)
	checkPrevious(t, c, ip)
	checkKubeletRefuses(t, c)
	deletePodsIn(ctx, t, c, logsNamespace, "logger")
}

func checkFollow(ctx context.Context, t *testing.T, c *cluster, say func(stream, text string)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := c.client.CoreV1().Pods(logsNamespace).GetLogs("logger", &corev1.PodLogOptions{Follow: true, TailLines: ptr.To[int64](1)}).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close() //nolint:errcheck // read only
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stream)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	next := func() string {
		select {
		case l := <-lines:
			return l
		case <-ctx.Done():
			return "(nothing within 30s)"
		}
	}
	if got := next(); got != "late" {
		t.Fatalf("follow starts with %q, want the last line", got)
	}
	say("stdout", "written while followed\n")
	if got := next(); got != "written while followed" {
		t.Errorf("the follower received %q, want the line written later", got)
	}
	t.Log("a follower received a line written after it started")
}

// checkPrevious makes the container exit and checks that previous=true serves the log of the
// run before the restart, and the current log starts afresh.
func checkPrevious(t *testing.T, c *cluster, ip string) {
	t.Helper()
	get(t, ip, "/exit?code=4")
	newIP := waitPodReady(t, c, logsNamespace, "logger", 1)
	get(t, newIP, "/log?text="+url.QueryEscape("after the restart\n"))
	if got := podLogs(t, c, "logger", &corev1.PodLogOptions{Previous: true, TailLines: ptr.To[int64](1)}); got != "written while followed\n" {
		t.Errorf("pods/log previous=true tailLines=1 = %q, want the first run's last line", got)
	}
	if got := podLogs(t, c, "logger", &corev1.PodLogOptions{}); got != "after the restart\n" {
		t.Errorf("pods/log after the restart = %q, want only the new run's line", got)
	}
	t.Log("previous=true serves the run before the restart")
}

// checkKubeletRefuses calls the kubelet API directly: without a client certificate (401), and
// with one of the cluster CA for a user without the right to nodes/proxy (403).
func checkKubeletRefuses(t *testing.T, c *cluster) {
	t.Helper()
	const url = "https://10.244.0.1:10250/containerLogs/" + logsNamespace + "/logger/server"
	if code := kubeletGet(t, url, nil); code != http.StatusUnauthorized {
		t.Errorf("the kubelet API answers %d to a client without a certificate, want 401", code)
	}
	certPEM, keyPEM, err := c.cp.ClientCertificate("someone", "some-group")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	if code := kubeletGet(t, url, &cert); code != http.StatusForbidden {
		t.Errorf("the kubelet API answers %d to a user without nodes/proxy, want 403", code)
	}
	if code := kubeletGet(t, "https://10.244.0.1:10250/healthz", &cert); code != http.StatusOK {
		t.Errorf("the kubelet API's healthz answers %d to a client of the cluster CA, want 200", code)
	}
	t.Log("the kubelet API refuses a client without a certificate (401) and a user without nodes/proxy (403)")
}

func kubeletGet(t *testing.T, url string, cert *tls.Certificate) int {
	t.Helper()
	cfg := &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12} //nolint:gosec // the agent's self-signed serving certificate; the client is what is tested
	if cert != nil {
		cfg.Certificates = []tls.Certificate{*cert}
	}
	client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: cfg}}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, url, http.NoBody)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func podLogs(t *testing.T, c *cluster, pod string, o *corev1.PodLogOptions) string {
	t.Helper()
	o.Container = "server"
	data, err := c.client.CoreV1().Pods(logsNamespace).GetLogs(pod, o).DoRaw(t.Context())
	if err != nil {
		t.Fatalf("pods/log %+v: %v: %s", o, err, data)
	}
	return string(data)
}

// waitPodReady waits until the pod's container is Ready with at least restarts restarts and
// returns the pod's address.
func waitPodReady(t *testing.T, c *cluster, namespace, name string, restarts int32) string {
	t.Helper()
	var ip string
	poll(t, "pod "+name+" Ready", 60*time.Second, func() (bool, error) {
		p, err := c.client.CoreV1().Pods(namespace).Get(t.Context(), name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		ip = p.Status.PodIP
		if len(p.Status.ContainerStatuses) != 1 {
			return false, fmt.Errorf("phase %s", p.Status.Phase)
		}
		cs := p.Status.ContainerStatuses[0]
		return ip != "" && cs.Ready && cs.RestartCount >= restarts, fmt.Errorf("container %+v", cs)
	})
	return ip
}

// createPod creates pod, waiting for its namespace's default ServiceAccount, which the
// controller manager creates shortly after the namespace.
func createPod(t *testing.T, c *cluster, pod *corev1.Pod) {
	t.Helper()
	poll(t, "pod "+pod.Name+" created", 30*time.Second, func() (bool, error) {
		_, err := c.client.CoreV1().Pods(pod.Namespace).Create(t.Context(), pod, metav1.CreateOptions{})
		if err != nil && !apierrors.IsForbidden(err) {
			t.Fatal(err)
		}
		return err == nil, err
	})
}

func deletePodsIn(ctx context.Context, t *testing.T, c *cluster, namespace string, names ...string) {
	t.Helper()
	for _, name := range names {
		if err := c.client.CoreV1().Pods(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Error(err)
		}
	}
}
