package settings

import "testing"

func TestStoreLoaded(t *testing.T) {
	t.Parallel()
	select {
	case <-NewStore(Defaults()).Loaded():
	default:
		t.Error("NewStore's settings are not final")
	}
	s := NewPendingStore(Defaults())
	select {
	case <-s.Loaded():
		t.Fatal("a pending store's settings are final before MarkLoaded")
	default:
	}
	s.MarkLoaded()
	s.MarkLoaded() // a second call does nothing
	select {
	case <-s.Loaded():
	default:
		t.Error("MarkLoaded did not close Loaded")
	}
}
