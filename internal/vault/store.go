package vault

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/nacl/secretbox"
)

// Files of the vault's data directory.
const (
	// KeyFile holds the 32-byte key that seals every value: created with
	// mode 0600 on first start, never rewritten.
	KeyFile = "vault.key"
	// StoreFile holds the sealed values, mode 0600: a log of one JSON
	// record a line (a sealed value, or a removal), appended on every
	// change and synced before the change is handed out (changes made at
	// the same time share one write and one sync), and written anew at
	// start when mostly superseded.
	StoreFile = "vault.store"
)

// valueBytes is how many random bytes make one value (256 bits).
const valueBytes = 32

// The group commit's pace for the values the vault's kit issues (its
// workers ensure credentials concurrently, see [Store.ensure]): a sync of
// the log that covers only such records starts no sooner than syncGap after
// the last one began, unless syncBatch records are pending, and the records
// appended meanwhile wait for it together. Credentials that come one at a
// time but close together (a cold start, where the seat writes the
// credential provisions node by node and the kit hands each to a worker as
// it comes) then cost a sync per syncGap, not one per value, whose count
// grew with the run's length rather than its values (5180 syncs for 29879
// values at 3000 nodes, 1002 for 9893 at 1000). Any other record (a value
// ensured by a verb, a rotation, a removal) is synced at once, with those
// pending, and so is a grouped record still pending when a caller that is
// not grouped waits for it ([Store.Ensure] or [Store.Get] of its name).
const (
	syncGap   = 20 * time.Millisecond
	syncBatch = 256
)

// Value is one value the vault keeps: its vault name, its generation
// (1 for a new value, +1 per rotation) and the value itself.
type Value struct {
	Name       string
	Generation int64
	Value      string
}

// sealedRecord is one value as the store file holds it. Sealed is the
// base64 of a 24-byte nonce followed by the secretbox of the JSON of
// openedRecord; the name and generation are sealed too, so that a record
// moved to another name or generation does not open.
type sealedRecord struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation,omitempty"`
	Sealed     string `json:"sealed,omitempty"`
	Removed    bool   `json:"removed,omitempty"` // the value was removed; Generation is its last generation
}

type openedRecord struct {
	Name       string `json:"name"`
	Generation int64  `json:"generation"`
	Value      string `json:"value"`
}

// Store keeps the vault's values encrypted at rest in a directory of its
// own (x/crypto's nacl/secretbox, XSalsa20-Poly1305). It is safe for
// concurrent use.
type Store struct {
	dir string
	// keyPath is the key file's path.
	keyPath string
	key     [32]byte
	mu      sync.Mutex
	values  map[string]Value
	// removed holds, for each removed name, the last generation it had
	// (kept as a removal record in the log), so that a value issued again
	// for that name gets the next generation and never a reference of
	// an older value.
	removed map[string]int64
	log     *os.File // the store file, open for appending
	records int      // records in the log
	// pending holds the records appended and not yet written to the log:
	// the next sync writes them with one write before it syncs, so that
	// values issued at the same time cost one write and one sync. spare
	// is the buffer of the last sync, emptied, for pending to take next.
	pending, spare []byte
	// taken is the sequence of the last record a sync took.
	taken uint64
	// urgent says that a pending record is to be synced at once (see
	// syncGap).
	urgent bool
	// full is signalled when the pending records are to be synced at
	// once: one is urgent, or syncBatch are pending (see syncGap).
	full chan struct{}
	// unsynced holds, for each name whose last record may not be synced
	// yet, that record's sequence in the log (see written).
	unsynced map[string]uint64

	// written counts the records appended since open: a record's sequence.
	// It moves after the record's write has returned, so a sync started
	// after reading it covers every record up to it.
	written atomic.Uint64

	// The group commit: one sync at a time covers every record written
	// before it began; callers that wrote meanwhile wait for the next.
	gmu      sync.Mutex // never held while taking mu
	gcond    *sync.Cond
	synced   uint64    // records known to be on disk
	syncs    int       // syncs run, for tests
	syncing  bool      // a sync is running
	lastSync time.Time // when the last sync began
	// size is how many bytes of the log are written whole and synced (a
	// write or sync that failed may have left more: dirty says so, and
	// the next try cuts the log back to size before writing again). Only
	// the goroutine that syncs touches size.
	size  int64
	dirty bool
	// lastErr is the error of the last try to write and sync the log, nil
	// once one succeeds; no try is made before retryAt (the backoff,
	// doubling from retryMin to retryMax while the tries fail).
	lastErr error
	retryAt time.Time
	backoff time.Duration

	// prev holds, for each name whose last record is not known synced, the
	// value it had before that record when it had one (what the disk
	// holds): [Store.Get] answers it while the record cannot be written.
	prev map[string]Value
	// torn is the record dropped at open, if any (see [Store.Torn]).
	torn *Torn
	// noCompactBelow is how many records the log must hold before a
	// compaction is tried again after one failed (0: none failed);
	// compactions counts those done while running, for tests.
	noCompactBelow int
	compactions    int
	// said receives what the store says that no caller is waiting for
	// (a compaction that failed). Nil means slog.Default().
	said *slog.Logger
	// closed says [Store.Close] ran: no record is written after.
	closed bool
}

// Empty reports whether the store holds no value and no removal (a new
// store, or one whose log was lost).
func (s *Store) Empty() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.values) == 0 && len(s.removed) == 0
}

// ErrClosed is wrapped by the error of a write to a store once
// [Store.Close] has run.
var ErrClosed = errors.New("vault: the store is closed")

// Close waits for a sync under way, writes and syncs the records pending
// (a caller may have given up waiting for them), and closes the store's
// log: a value or removal asked of it afterwards fails with [ErrClosed],
// and nothing is written to the log after Close returns. It returns the
// error of the last write or of closing the file.
func (s *Store) Close() error {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for s.syncing {
		s.gcond.Wait()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var err error
	if len(s.pending) > 0 {
		if err = s.write(s.pending, s.dirty); err == nil {
			s.pending = nil
			s.synced = s.written.Load()
		}
	}
	if cerr := s.log.Close(); err == nil {
		err = cerr
	}
	return err
}

// Torn is the record a store dropped when it opened: the last line of its
// log, cut short (no newline, or not JSON) by a write that was never
// acknowledged (a crash or a full disk during the write), so that what it
// said was never handed out. The store holds what it held before that
// record: a new value is issued again when it is next asked for.
type Torn struct {
	// Line is the record's line in the log, from 1; Bytes how many bytes
	// of it were written.
	Line, Bytes int
	// Name is the vault name the record was written for, when so much of
	// it was written ("" otherwise); Generation is the generation the
	// store holds for Name after the drop (0 for none).
	Name       string
	Generation int64
}

// The backoff of the tries to write the log after one failed (a full
// disk): a caller during the backoff gets the last error at once, and the
// records stay pending, written by the first try that succeeds.
const (
	retryMin = 10 * time.Millisecond
	retryMax = 2 * time.Second
)

// OpenStore opens the store in dir, creating dir (mode 0700), the key file
// (mode 0600) on first start, and an empty store. It returns an error when
// the key file is not 32 bytes, or when a stored value does not open with
// the key (a wrong key or a changed file): nothing is guessed.
func OpenStore(dir string) (*Store, error) { return OpenStoreKey(dir, "") }

// OpenStoreKey is [OpenStore] with the key in keyFile rather than in dir
// ("" means dir/vault.key): made (mode 0600) on first start, and refused
// when its group or others may read or write it, since whoever reads it
// opens every value of a copy of the store.
func OpenStoreKey(dir, keyFile string) (*Store, error) {
	if dir == "" {
		return nil, errors.New("vault: the data directory is not set")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("vault: data directory: %w", err)
	}
	s := &Store{said: slog.Default(), dir: dir, values: map[string]Value{}, removed: map[string]int64{}, unsynced: map[string]uint64{}, prev: map[string]Value{}, full: make(chan struct{}, 1)}
	s.gcond = sync.NewCond(&s.gmu)
	s.keyPath = keyFile
	if s.keyPath == "" {
		s.keyPath = filepath.Join(dir, KeyFile)
	}
	if err := s.loadKey(); err != nil {
		return nil, err
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

func (s *Store) loadKey() error {
	path := s.keyPath
	if st, err := os.Stat(path); err == nil && st.Mode().Perm()&0o077 != 0 {
		return fmt.Errorf("vault: key file %s has mode %04o: others may read the key that opens every value; chmod 600 it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if _, err := rand.Read(s.key[:]); err != nil {
			return fmt.Errorf("vault: new key: %w", err)
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return fmt.Errorf("vault: create key file: %w", err)
		}
		if _, err := f.Write(s.key[:]); err != nil {
			f.Close()
			return fmt.Errorf("vault: write key file: %w", err)
		}
		if err := f.Sync(); err != nil {
			f.Close()
			return fmt.Errorf("vault: write key file: %w", err)
		}
		return f.Close()
	}
	if err != nil {
		return fmt.Errorf("vault: read key file: %w", err)
	}
	if len(b) != len(s.key) {
		return fmt.Errorf("vault: key file %s holds %d bytes; want %d", path, len(b), len(s.key))
	}
	copy(s.key[:], b)
	return nil
}

func (s *Store) load() error {
	path := filepath.Join(s.dir, StoreFile)
	// A compaction's temporary file left by a crash before its rename
	// holds nothing the log does not.
	if stale, err := filepath.Glob(filepath.Join(s.dir, StoreFile+".*")); err == nil {
		for _, f := range stale {
			os.Remove(f)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("vault: read store: %w", err)
	}
	created := errors.Is(err, fs.ErrNotExist)
	good, err := s.read(path, data)
	if err != nil {
		return err
	}
	if s.torn != nil {
		if v, ok := s.values[s.torn.Name]; ok {
			s.torn.Generation = v.Generation
		}
	}
	// A log that is mostly superseded records is written anew.
	compacted := false
	if s.superseded() {
		if err := s.compact(); err != nil {
			return err
		}
		compacted = true
	}
	s.log, err = os.OpenFile(path, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
	if err != nil {
		return fmt.Errorf("vault: open store: %w", err)
	}
	switch {
	case compacted:
	case s.torn != nil:
		// The torn record goes, so that the next record starts a line.
		if err := s.log.Truncate(good); err != nil {
			s.log.Close()
			return fmt.Errorf("vault: drop the torn record of the store: %w", err)
		}
		if err := s.log.Sync(); err != nil {
			s.log.Close()
			return fmt.Errorf("vault: drop the torn record of the store: %w", err)
		}
		s.size = good
	case created:
		if err := syncDir(s.dir); err != nil {
			s.log.Close()
			return err
		}
	default:
		s.size = good
	}
	return nil
}

// read takes the records of the log data (the file at path) into the
// store and returns how many bytes of it are whole records. The last line,
// when it has no newline or is not JSON, is a torn record (see [Torn]):
// it is kept in s.torn, not taken. Any other line that is not JSON, or a
// record that does not open with the key, is an error: nothing is guessed.
func (s *Store) read(path string, data []byte) (int64, error) {
	line, off := 0, 0
	for off < len(data) {
		line++
		nl := bytes.IndexByte(data[off:], '\n')
		if nl < 0 {
			s.torn = tornRecord(line, data[off:])
			break
		}
		text := data[off : off+nl]
		next := off + nl + 1
		if len(bytes.TrimSpace(text)) == 0 {
			off = next
			continue
		}
		var r sealedRecord
		if err := json.Unmarshal(text, &r); err != nil {
			if next == len(data) {
				s.torn = tornRecord(line, data[off:])
				break
			}
			return 0, fmt.Errorf("vault: store %s line %d does not decode: %w", path, line, err)
		}
		s.records++
		if r.Removed {
			s.forget(r.Name, r.Generation)
		} else {
			v, err := s.open(r)
			if err != nil {
				return 0, err
			}
			s.values[v.Name] = v
			delete(s.removed, v.Name)
		}
		off = next
	}
	return int64(off), nil
}

// tornRecord describes the torn record b at line: the name it was written
// for, when its start says it whole (a record starts {"name":"<name>",).
func tornRecord(line int, b []byte) *Torn {
	t := &Torn{Line: line, Bytes: len(b)}
	if rest, ok := strings.CutPrefix(string(b), `{"name":"`); ok {
		if name, _, ok := strings.Cut(rest, `"`); ok {
			t.Name = name
		}
	}
	return t
}

// Torn returns the record the store dropped when it opened (see [Torn]),
// and whether it dropped one.
func (s *Store) Torn() (Torn, bool) {
	if s.torn == nil {
		return Torn{}, false
	}
	return *s.torn, true
}

// superseded reports whether the log is mostly superseded records: more
// than 2 a value kept (or a removal) and 64. s.mu is held or the store is
// loading.
func (s *Store) superseded() bool {
	return s.records > 2*(len(s.values)+len(s.removed))+64
}

// syncDir syncs the directory dir, so that a file created or renamed in it
// is there after a crash.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("vault: sync data directory: %w", err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("vault: sync data directory: %w", err)
	}
	return nil
}

func (s *Store) open(r sealedRecord) (Value, error) {
	raw, err := base64.StdEncoding.DecodeString(r.Sealed)
	if err != nil || len(raw) < 24 {
		return Value{}, fmt.Errorf("vault: value %s is not sealed data", r.Name)
	}
	var nonce [24]byte
	copy(nonce[:], raw[:24])
	plain, ok := secretbox.Open(nil, raw[24:], &nonce, &s.key)
	if !ok {
		return Value{}, fmt.Errorf("vault: value %s does not open with the key in %s", r.Name, KeyFile)
	}
	var o openedRecord
	if err := json.Unmarshal(plain, &o); err != nil || o.Name != r.Name || o.Generation != r.Generation {
		return Value{}, fmt.Errorf("vault: value %s was sealed for another name or generation", r.Name)
	}
	return Value{Name: o.Name, Generation: o.Generation, Value: o.Value}, nil
}

func (s *Store) seal(v Value) (sealedRecord, error) {
	plain, err := json.Marshal(openedRecord{Name: v.Name, Generation: v.Generation, Value: v.Value})
	if err != nil {
		return sealedRecord{}, err
	}
	var nonce [24]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return sealedRecord{}, fmt.Errorf("vault: nonce: %w", err)
	}
	box := secretbox.Seal(nonce[:], plain, &nonce, &s.key)
	return sealedRecord{Name: v.Name, Generation: v.Generation, Sealed: base64.StdEncoding.EncodeToString(box)}, nil
}

// append adds one record to the records pending for the store's log and
// returns its sequence: the caller waits for [Store.waitSynced] of it,
// after releasing s.mu, before it hands out what the record says, so that a
// value handed out is never lost to a crash. A grouped record may wait for
// others to share its sync (see syncGap); any other is synced at once.
// s.mu is held.
func (s *Store) append(r sealedRecord, grouped bool) (uint64, error) {
	if s.closed {
		return 0, ErrClosed
	}
	b, err := json.Marshal(r)
	if err != nil {
		return 0, fmt.Errorf("vault: store: %w", err)
	}
	s.pending = append(append(s.pending, b...), '\n')
	s.records++
	seq := s.written.Add(1)
	s.urgent = s.urgent || !grouped
	if s.urgent || seq-s.taken >= syncBatch {
		s.hurry()
	}
	return seq, nil
}

// waitSynced returns once the record with sequence seq is on disk: it
// writes the pending records to the log and syncs it itself unless a sync
// is running, whose end it then waits for (a sync covers every record
// appended before it began, so records appended at the same time share one
// write and one sync; see syncGap for how long a sync waits for more).
//
// A write or sync that fails (a full disk) loses nothing: its records stay
// pending, in order, and the log is cut back to its last whole record
// before the next try, so that a record is written whole or not at all.
// The error is returned to the callers waiting for those records, and at
// once to those that come during the backoff (retryMin, doubling up to
// retryMax); the first caller after it tries again. s.mu is not held.
func (s *Store) waitSynced(seq uint64) error {
	s.gmu.Lock()
	defer s.gmu.Unlock()
	for s.synced < seq {
		if s.syncing {
			s.gcond.Wait()
			continue
		}
		if s.lastErr != nil && time.Now().Before(s.retryAt) {
			return s.lastErr
		}
		s.syncing = true
		last, dirty, base := s.lastSync, s.dirty, s.synced
		s.gmu.Unlock()
		if wait := syncGap - time.Since(last); wait > 0 && !dirty {
			s.gather(wait)
		}
		began := time.Now()
		s.mu.Lock()
		records, target := s.pending, s.written.Load()
		s.pending, s.spare, s.taken, s.urgent = s.spare, nil, target, false
		s.mu.Unlock()
		err := s.write(records, dirty)
		s.mu.Lock()
		switch {
		case err != nil:
			// Kept, ahead of those appended meanwhile.
			s.pending, s.taken = append(records, s.pending...), base
		case cap(records) <= 1<<20:
			s.spare = records[:0]
		}
		s.mu.Unlock()
		s.gmu.Lock()
		s.syncs++
		s.lastSync = began
		if err != nil {
			s.dirty = true
			s.backoff = min(max(2*s.backoff, retryMin), retryMax)
			s.retryAt = time.Now().Add(s.backoff)
			s.lastErr = fmt.Errorf("vault: write and sync store (its records are kept and written again): %w", err)
		} else {
			s.synced, s.dirty, s.lastErr, s.backoff = target, false, nil, 0
			// The callers of the records synced go on; the next
			// sync waits for the compaction.
			s.gcond.Broadcast()
			s.gmu.Unlock()
			s.compactRunning()
			s.gmu.Lock()
		}
		s.syncing = false
		s.gcond.Broadcast()
	}
	return nil
}

// write appends records to the log and syncs it, after cutting it back to
// its last whole record when dirty (a try failed since). A write or sync
// that fails cuts the log back at once (a shorter file needs no space),
// so that no torn record stays in it; dirty stays set all the same, for
// the next try. Only the goroutine that syncs calls it.
func (s *Store) write(records []byte, dirty bool) error {
	if dirty {
		if err := s.log.Truncate(s.size); err != nil {
			return err
		}
	}
	_, err := s.log.Write(records)
	if err == nil {
		err = s.log.Sync()
	}
	if err != nil {
		s.log.Truncate(s.size)
		return err
	}
	s.size += int64(len(records))
	return nil
}

// hurry signals full (once: a signal already given stands) so that the
// pending records are synced at once.
func (s *Store) hurry() {
	select {
	case s.full <- struct{}{}:
	default:
	}
}

// gather waits up to wait for the pending records to be synced at once:
// one urgent, or syncBatch of them (see syncGap). s.mu and s.gmu are not
// held.
func (s *Store) gather(wait time.Duration) {
	// A signal left from records a sync has taken since.
	select {
	case <-s.full:
	default:
	}
	s.mu.Lock()
	now := s.urgent || s.written.Load()-s.taken >= syncBatch
	s.mu.Unlock()
	if now {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-s.full:
	}
}

// settle waits until name's last record, at sequence seq (0 for none),
// is on disk, then forgets that it was unsynced. A caller that is not
// grouped (see syncGap) does not wait for the gap: when the record is
// still pending (appended grouped, by another caller), it is synced at
// once, with those pending.
func (s *Store) settle(name string, seq uint64, grouped bool) error {
	if seq == 0 {
		return nil
	}
	if !grouped {
		s.mu.Lock()
		if seq > s.taken && !s.urgent {
			s.urgent = true
			s.hurry()
		}
		s.mu.Unlock()
	}
	if err := s.waitSynced(seq); err != nil {
		return err
	}
	s.mu.Lock()
	if s.unsynced[name] == seq {
		delete(s.unsynced, name)
		delete(s.prev, name)
	}
	s.mu.Unlock()
	return nil
}

// forget drops the value named name, keeping the last generation it had
// (the greater of generation and the value's own). s.mu is held or the
// store is loading.
func (s *Store) forget(name string, generation int64) {
	if v, ok := s.values[name]; ok && v.Generation > generation {
		generation = v.Generation
	}
	if g, ok := s.removed[name]; ok && g > generation {
		generation = g
	}
	delete(s.values, name)
	s.removed[name] = generation
}

// compact writes every value, sealed, and a removal record for every
// removed name (with its last generation) to a new log that replaces the
// old one (see [writeLog]). The store is loading.
func (s *Store) compact() error {
	size, err := s.writeLog(s.values, s.removed)
	if err != nil {
		return err
	}
	s.records, s.size = len(s.values)+len(s.removed), size
	return nil
}

// compactRunning compacts the log of a running store once it is mostly
// superseded records (see superseded): 300 rotations of one value left
// 301 sealed values until the next start. It runs on the goroutine that
// syncs, after a sync, so no write of the log runs meanwhile; it takes the
// store's state only when no record is pending (every record the maps say
// is then on disk: the new log holds exactly what the old one does), and
// records appended while it writes stay pending for the next sync, which
// appends them to the new log. A compaction that fails leaves the old log
// (said in the log) and is not tried again before the log has grown by
// half.
func (s *Store) compactRunning() {
	s.mu.Lock()
	if !s.superseded() || len(s.pending) > 0 || s.records < s.noCompactBelow {
		s.mu.Unlock()
		return
	}
	values, removed := maps.Clone(s.values), maps.Clone(s.removed)
	records := s.records
	s.mu.Unlock()
	size, err := s.writeLog(values, removed)
	var log *os.File
	if err == nil {
		// The new file, for the appends to come; the old one is no
		// longer the store's.
		log, err = os.OpenFile(filepath.Join(s.dir, StoreFile), os.O_WRONLY|os.O_APPEND, 0o600)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.noCompactBelow = records + records/2
		s.said.Error("vault: the store's log could not be compacted; it is kept as it is and compacted when it has grown by half", "records", records, "err", err)
		return
	}
	old := s.log
	s.log, s.size = log, size
	s.records = len(values) + len(removed) + (s.records - records)
	s.noCompactBelow = 0
	s.compactions++
	old.Close()
}

// writeLog writes values, sealed, and a removal record for every name of
// removed (its last generation) to a new log that replaces the store's
// file, and returns its size in bytes. It is safe against a crash at any
// point: the new log is written to a temporary file in the same directory
// and synced, then renamed over the store's file, and the directory
// synced; a crash before the rename leaves the old log whole (and the
// temporary file, removed at the next open), one after it the new log.
func (s *Store) writeLog(values map[string]Value, removed map[string]int64) (int64, error) {
	names := make([]string, 0, len(values)+len(removed))
	for n := range values {
		names = append(names, n)
	}
	for n := range removed {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	for _, n := range names {
		r := sealedRecord{Name: n, Generation: removed[n], Removed: true}
		if v, ok := values[n]; ok {
			var err error
			if r, err = s.seal(v); err != nil {
				return 0, err
			}
		}
		b, err := json.Marshal(r)
		if err != nil {
			return 0, fmt.Errorf("vault: store: %w", err)
		}
		buf.Write(b)
		buf.WriteByte('\n')
	}
	tmp, err := os.CreateTemp(s.dir, StoreFile+".*")
	if err != nil {
		return 0, fmt.Errorf("vault: write store: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("vault: write store: %w", err)
	}
	if _, err := tmp.Write(buf.Bytes()); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("vault: write store: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return 0, fmt.Errorf("vault: write store: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return 0, fmt.Errorf("vault: write store: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(s.dir, StoreFile)); err != nil {
		return 0, fmt.Errorf("vault: write store: %w", err)
	}
	if err := syncDir(s.dir); err != nil {
		return 0, err
	}
	return int64(buf.Len()), nil
}

// newValue returns a strong random value: 32 bytes from crypto/rand,
// base64url without padding (43 characters).
func newValue() (string, error) {
	b := make([]byte, valueBytes)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("vault: random value: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// Get returns the value named name, and whether the store holds one. A
// value just written (or a removal) is returned once it is on disk; while
// its record cannot be written (see [Store.waitSynced]), Get returns what
// the disk holds: the value before it, or none.
func (s *Store) Get(name string) (Value, bool) {
	s.mu.Lock()
	v, ok := s.values[name]
	seq := s.unsynced[name]
	before, had := s.prev[name]
	s.mu.Unlock()
	if s.settle(name, seq, false) != nil {
		return before, had
	}
	return v, ok
}

// Ensure returns the value named name, generating it (and saving the
// store) when the store holds none: at generation 1 for a name never held,
// or at the generation after the last one of a removed name, so that the
// reference {name, generation} of a value issued again never equals an
// older value's. It returns once the value is on disk (values ensured at
// the same time share one sync), or the error of the write or the sync.
func (s *Store) Ensure(name string) (Value, error) { return s.ensure(name, false) }

// ensure is [Store.Ensure]; a grouped value (the kit's credentials) may
// wait up to syncGap for others to share its sync.
func (s *Store) ensure(name string, grouped bool) (Value, error) {
	v, _, _, err := s.ensureFrom(name, 0, grouped)
	return v, err
}

// ensureFrom is ensure of a value already handed out up to generation
// published (the generation its entry names on the bus; 0 for none). When
// the store holds less (a lost store, or one restored from an older copy:
// the value handed out is gone), it issues a new value at the generation
// after published, never a second value under a generation used, and
// returns held, the generation it held (0 for none), with lost true.
func (s *Store) ensureFrom(name string, published int64, grouped bool) (v Value, held int64, lost bool, err error) {
	s.mu.Lock()
	v, ok := s.values[name]
	held = s.removed[name]
	if ok {
		held = v.Generation
	}
	var seq uint64
	if ok && held >= published {
		seq = s.unsynced[name]
	} else {
		lost = published > held
		v, seq, err = s.set(name, max(held, published)+1, grouped)
	}
	s.mu.Unlock()
	if err != nil {
		return Value{}, held, lost, err
	}
	if err := s.settle(name, seq, grouped); err != nil {
		return Value{}, held, lost, err
	}
	return v, held, lost, nil
}

// Rotate gives name a new value at the next generation and saves the store,
// returning once the value is on disk. It returns [ErrUnknown] when the
// store holds no value named name.
func (s *Store) Rotate(name string) (Value, error) {
	s.mu.Lock()
	v, ok := s.values[name]
	if !ok {
		s.mu.Unlock()
		return Value{}, fmt.Errorf("%w: %s", ErrUnknown, name)
	}
	v, seq, err := s.set(name, v.Generation+1, false)
	s.mu.Unlock()
	if err != nil {
		return Value{}, err
	}
	if err := s.settle(name, seq, false); err != nil {
		return Value{}, err
	}
	return v, nil
}

// set appends a new value for name at generation (grouped: see append)
// and keeps it; the caller settles the returned sequence before handing the
// value out. s.mu is held.
func (s *Store) set(name string, generation int64, grouped bool) (Value, uint64, error) {
	value, err := newValue()
	if err != nil {
		return Value{}, 0, err
	}
	v := Value{Name: name, Generation: generation, Value: value}
	r, err := s.seal(v)
	if err != nil {
		return Value{}, 0, err
	}
	seq, err := s.append(r, grouped)
	if err != nil {
		return Value{}, 0, err
	}
	s.keepPrev(name)
	s.values[name] = v
	s.unsynced[name] = seq
	delete(s.removed, name)
	return v, seq, nil
}

// keepPrev keeps name's value as the disk holds it in prev, before a new
// record for name is appended, unless an earlier record for it is not
// known synced either (prev holds what the disk has, then). s.mu is held.
func (s *Store) keepPrev(name string) {
	if _, pending := s.unsynced[name]; pending {
		return
	}
	if v, ok := s.values[name]; ok {
		s.prev[name] = v
	}
}

// Remove forgets the value named name and saves the store, appending a
// removal record that keeps the value's last generation (a value issued
// again for name starts after it); removing a name the store does not
// hold does nothing. It returns once the removal is on disk.
func (s *Store) Remove(name string) error {
	s.mu.Lock()
	v, ok := s.values[name]
	if !ok {
		// Removed already, its removal perhaps not on disk yet.
		seq := s.unsynced[name]
		s.mu.Unlock()
		return s.settle(name, seq, false)
	}
	seq, err := s.append(sealedRecord{Name: name, Generation: v.Generation, Removed: true}, false)
	if err == nil {
		s.keepPrev(name)
		s.forget(name, v.Generation)
		s.unsynced[name] = seq
	}
	s.mu.Unlock()
	if err != nil {
		return err
	}
	return s.settle(name, seq, false)
}
