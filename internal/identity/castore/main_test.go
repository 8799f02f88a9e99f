package castore

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/utils/clock"

	"coxswain.dev/coxswain/api/v1alpha1"
	"coxswain.dev/coxswain/discovery/pki"
	"coxswain.dev/coxswain/discovery/wellknown"
	"coxswain.dev/coxswain/internal/identity/trustbundle"
	"coxswain.dev/coxswain/internal/readiness"
	"coxswain.dev/coxswain/internal/settings"
	"coxswain.dev/coxswain/internal/testenv"
)

var clientset kubernetes.Interface

func TestMain(m *testing.M) {
	os.Exit(testenv.Main(m, setup))
}

func setup(cfg *rest.Config) (err error) {
	clientset, err = kubernetes.NewForConfig(cfg)
	return err
}

// newNamespace creates a namespace for one test; each test plays a controller installed there.
func newNamespace(t *testing.T, name string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}
	if _, err := clientset.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// harness is one replica's Store with its board, running until the test ends.
type harness struct {
	store *Store
	board *readiness.Board
	set   *settings.Store
	// stop ends the replica; the test's end does too.
	stop func()
}

type harnessOption func(*Options, *settings.Settings)

func external() harnessOption {
	return func(_ *Options, s *settings.Settings) { s.CAMode = v1alpha1.CAModeExternal }
}

func withClock(c clock.Clock) harnessOption {
	return func(o *Options, _ *settings.Settings) { o.Clock = c }
}

func withLifetime(d time.Duration) harnessOption {
	return func(o *Options, _ *settings.Settings) { o.CALifetime = d }
}

func withSVIDTTL(d time.Duration) harnessOption {
	return func(_ *Options, s *settings.Settings) { s.SVIDTTL = d }
}

// startStore runs a Store for namespace until the test ends.
func startStore(t *testing.T, namespace string, opts ...harnessOption) *harness {
	t.Helper()
	st := settings.Defaults()
	board := readiness.NewBoard(v1alpha1.ConditionCAReady, v1alpha1.ConditionTrustBundlePublished)
	log := testr.New(t)
	o := Options{
		Client: clientset, Namespace: namespace, Board: board, Recorder: newRecorder(t),
		Publisher: trustbundle.NewPublisher(clientset, namespace, board, log.WithName("trust")),
		Logger:    log.WithName("ca"),
	}
	for _, opt := range opts {
		opt(&o, &st)
	}
	o.Settings = settings.NewStore(st)
	store, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := store.Start(ctx); err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	stop := func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return &harness{store: store, board: board, set: o.Settings, stop: stop}
}

func newRecorder(t *testing.T) events.EventRecorder {
	t.Helper()
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: clientset.EventsV1()})
	ctx, cancel := context.WithCancel(context.Background())
	b.StartRecordingToSink(ctx.Done())
	t.Cleanup(func() { cancel(); b.Shutdown() })
	return b.NewRecorder(clientgoscheme.Scheme, "coxswain")
}

// eventually polls cond every 50ms until it holds or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond) // polling interval, not synchronisation
	}
}

const wait = 15 * time.Second

// afterClockMove is eventually for a condition the store reaches once it sees a fake clock that
// was just moved: it pokes the store's session on every poll. A session that read the clock just
// before the move and set its timer just after would sleep until the new time plus the whole
// wait it computed (a fake clock's timers count from when they are made), which with a real
// clock cannot happen.
func (h *harness) afterClockMove(t *testing.T, what string, cond func() bool) {
	t.Helper()
	eventually(t, wait, what, func() bool {
		if cond() {
			return true
		}
		select {
		case h.store.poke <- struct{}{}:
		default:
		}
		return false
	})
}

// condition returns the CAReady condition.
func (h *harness) condition() metav1.Condition {
	for _, c := range h.board.Conditions() {
		if c.Type == v1alpha1.ConditionCAReady {
			return c
		}
	}
	return metav1.Condition{}
}

// waitCA waits until the store signs with a CA and returns it.
func (h *harness) waitCA(t *testing.T) *pki.CA {
	t.Helper()
	var ca *pki.CA
	eventually(t, wait, "a usable CA", func() bool {
		c, _, err := h.store.Current()
		ca = c
		return err == nil
	})
	return ca
}

// waitReason waits until CAReady has reason.
func (h *harness) waitReason(t *testing.T, status metav1.ConditionStatus, reason string) {
	t.Helper()
	eventually(t, wait, "CAReady "+string(status)+" "+reason, func() bool {
		c := h.condition()
		return c.Status == status && c.Reason == reason
	})
}

// waitEvent waits for an event of reason about the CA Secret in namespace.
func waitEvent(t *testing.T, namespace, reason string) corev1.Event {
	t.Helper()
	var ev corev1.Event
	eventually(t, wait, "event "+reason, func() bool {
		list, err := clientset.CoreV1().Events(namespace).List(t.Context(), metav1.ListOptions{FieldSelector: "reason=" + reason})
		if err != nil || len(list.Items) == 0 {
			return false
		}
		ev = list.Items[0]
		return true
	})
	return ev
}

// publishedBundle reads the trust bundle ConfigMap of namespace.
func publishedBundle(t *testing.T, namespace string) (*pki.Bundle, bool) {
	t.Helper()
	cm, err := clientset.CoreV1().ConfigMaps(namespace).Get(t.Context(), wellknown.TrustBundleConfigMapName, metav1.GetOptions{})
	if err != nil {
		return nil, false
	}
	b, err := pki.ParseBundlePEM([]byte(cm.Data[wellknown.TrustBundleKey]))
	return b, err == nil
}

// waitPublished waits until the ConfigMap holds exactly want.
func waitPublished(t *testing.T, namespace string, want *pki.Bundle) {
	t.Helper()
	eventually(t, wait, "the trust bundle ConfigMap", func() bool {
		got, ok := publishedBundle(t, namespace)
		return ok && got.Equal(want)
	})
}
