package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// postgres is a PostgreSQL server run as this process's child.
type postgres struct {
	cmd  *exec.Cmd
	url  string
	done chan struct{}
}

// startPostgres initialises dataDir when it holds no cluster, then starts
// PostgreSQL on a free loopback port and waits until it accepts connections.
//
// The cluster trusts loopback connections (no password): it listens only on
// 127.0.0.1 and on a socket inside dataDir, for a single local user's tests.
// The server gets SIGQUIT (immediate shutdown; WAL replay on the next start
// makes it safe) if this process dies, even by SIGKILL, through the
// parent-death signal, so it never outlives us for long. SIGTERM (smart
// shutdown) waited for clients and left postmaster.pid in place while the
// next start came: the torture test measured that race.
func startPostgres(binDir, dataDir, runAs string) (*postgres, error) {
	cred, err := credentialFor(runAs)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	if cred != nil {
		if err := os.Chown(dataDir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, err
		}
	}
	if _, err := os.Stat(filepath.Join(dataDir, "PG_VERSION")); errors.Is(err, os.ErrNotExist) {
		initdb := exec.Command(filepath.Join(binDir, "initdb"),
			"--pgdata="+dataDir, "--username=postgres", "--auth=trust", "--encoding=UTF8", "--locale=C.UTF-8", "--no-sync")
		initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
		if out, err := initdb.CombinedOutput(); err != nil {
			return nil, fmt.Errorf("initdb %s: %v: %s", dataDir, err, tail(out))
		}
	}
	if err := reclaimDataDir(dataDir, 30*time.Second); err != nil {
		return nil, err
	}
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(binDir, "postgres"),
		"-D", dataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port="+strconv.Itoa(port),
		"-c", "unix_socket_directories="+dataDir,
		"-c", "max_connections=300",
		"-c", "logging_collector=off",
		"-c", "log_min_messages=fatal",
	)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start postgres: %w", err)
	}
	pg := &postgres{cmd: cmd, url: fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres", port), done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		close(pg.done)
	}()
	if err := pg.waitReady(binDir, port, 60*time.Second); err != nil {
		pg.stop()
		return nil, err
	}
	if err := indexIDsForContainment(binDir, port); err != nil {
		pg.stop()
		return nil, err
	}
	return pg, nil
}

// idContainmentIndexSQL gives every FerretDB table an index that its reads by _id can use.
//
// Why: FerretDB v1.24 pushes a filter {_id: v} down to PostgreSQL as
// `_jsonb -> '_id' @> v`, but indexes `_id` with a btree on `_jsonb -> '_id'`, which
// cannot answer `@>`; every findOne by _id was a sequential scan (24 ms at 100,000
// ledger entries, growing with the table; the ledger's duplicate path and the
// kernel's journal reads stalled the bench for minutes once the table was large). A GIN
// index (jsonb_path_ops) on the same expression answers `@>`: 0.8 ms at 100,000 once
// the table has statistics (autovacuum's analyze). MongoDB answers these reads from its
// _id index; this makes the substitute behave alike. docs/decisions/0021-ferretdb-pg-id-index.md.
//
// Idempotent: existing tables get the index once, new ones from an event trigger on
// CREATE TABLE (in the same transaction as FerretDB's own DDL).
const idContainmentIndexSQL = `
CREATE OR REPLACE FUNCTION public.keycap_index_id(tbl regclass) RETURNS void LANGUAGE plpgsql AS $f$
BEGIN
  IF EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = tbl AND attname = '_jsonb' AND NOT attisdropped)
     AND NOT EXISTS (SELECT 1 FROM pg_indexes i JOIN pg_class c ON c.relname = i.tablename
                     JOIN pg_namespace n ON n.oid = c.relnamespace AND n.nspname = i.schemaname
                     WHERE c.oid = tbl AND i.indexdef LIKE '%USING gin (((_jsonb -> ''\_id''::text)) jsonb_path_ops)%') THEN
    EXECUTE format('CREATE INDEX ON %s USING gin ((_jsonb -> %L) jsonb_path_ops) WITH (fastupdate = off)', tbl, '_id');
  END IF;
END $f$;

CREATE OR REPLACE FUNCTION public.keycap_index_id_on_create() RETURNS event_trigger LANGUAGE plpgsql AS $f$
DECLARE r record;
BEGIN
  FOR r IN SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE TABLE' AND object_type = 'table' LOOP
    PERFORM public.keycap_index_id(r.objid::regclass);
  END LOOP;
END $f$;

DO $f$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'keycap_index_id') THEN
    CREATE EVENT TRIGGER keycap_index_id ON ddl_command_end WHEN TAG IN ('CREATE TABLE') EXECUTE FUNCTION public.keycap_index_id_on_create();
  END IF;
END $f$;

SELECT public.keycap_index_id(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE c.relkind = 'r' AND n.nspname NOT IN ('pg_catalog', 'information_schema');

-- ADR 0033: a single-field index a service names eq_<...> is there for equality reads, which
-- FerretDB pushes down as "_jsonb -> 'f' @> v"; its btree cannot answer them, so it gets a
-- GIN twin on the same expression. FerretDB names the index <table (30 chars)>_<name>_<hash>_idx.
CREATE OR REPLACE FUNCTION public.keycap_twin_eq_index(idx regclass) RETURNS void LANGUAGE plpgsql AS $f$
DECLARE def text; tbl regclass; iname text; tname text; field text[];
BEGIN
  SELECT i.indrelid::regclass, pg_get_indexdef(i.indexrelid), c.relname, t.relname INTO tbl, def, iname, tname
    FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_class t ON t.oid = i.indrelid
   WHERE i.indexrelid = idx;
  IF def IS NULL OR NOT starts_with(iname, left(tname, 30) || '_eq_') THEN RETURN; END IF;
  field := regexp_match(def, 'USING btree \(\(\(_jsonb -> ''([^'']+)''::text\)\)\)$');
  IF field IS NULL THEN RETURN; END IF;
  EXECUTE format('CREATE INDEX IF NOT EXISTS %I ON %s USING gin ((_jsonb -> %L) jsonb_path_ops) WITH (fastupdate = off)',
                 left(iname, 59) || '_gin', tbl, field[1]);
END $f$;

CREATE OR REPLACE FUNCTION public.keycap_twin_eq_index_on_create() RETURNS event_trigger LANGUAGE plpgsql AS $f$
DECLARE r record;
BEGIN
  FOR r IN SELECT objid FROM pg_event_trigger_ddl_commands() WHERE command_tag = 'CREATE INDEX' AND object_type = 'index' LOOP
    PERFORM public.keycap_twin_eq_index(r.objid::regclass);
  END LOOP;
END $f$;

DO $f$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_event_trigger WHERE evtname = 'keycap_twin_eq_index') THEN
    CREATE EVENT TRIGGER keycap_twin_eq_index ON ddl_command_end WHEN TAG IN ('CREATE INDEX') EXECUTE FUNCTION public.keycap_twin_eq_index_on_create();
  END IF;
END $f$;

SELECT public.keycap_twin_eq_index(i.indexrelid) FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
  JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname NOT IN ('pg_catalog', 'information_schema', 'pg_toast');
`

// indexIDsForContainment runs idContainmentIndexSQL with the cluster's own psql.
func indexIDsForContainment(binDir string, port int) error {
	psql := exec.Command(filepath.Join(binDir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1",
		"-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "-d", "postgres")
	psql.Stdin = strings.NewReader(idContainmentIndexSQL)
	if out, err := psql.CombinedOutput(); err != nil {
		return fmt.Errorf("index _id for FerretDB's pushdown (psql): %v: %s", err, tail(out))
	}
	return nil
}

func (pg *postgres) waitReady(binDir string, port int, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	for {
		// pg_isready, not a TCP dial: the port accepts before recovery ends.
		probe := exec.CommandContext(ctx, filepath.Join(binDir, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres")
		if probe.Run() == nil {
			return nil
		}
		select {
		case <-pg.done:
			return errors.New("postgres exited during start (its log is above)")
		case <-ctx.Done():
			return fmt.Errorf("postgres not ready on port %d after %s", port, timeout)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// exited is closed when the server stops; nil (blocks forever) without one.
func (pg *postgres) exited() <-chan struct{} {
	if pg == nil {
		return nil
	}
	return pg.done
}

// stop asks for a fast shutdown (SIGINT: roll back, checkpoint, exit) and
// waits for it; SIGKILL after 20 s.
func (pg *postgres) stop() {
	if pg == nil {
		return
	}
	_ = pg.cmd.Process.Signal(syscall.SIGINT)
	select {
	case <-pg.done:
	case <-time.After(20 * time.Second):
		_ = pg.cmd.Process.Kill()
		<-pg.done
	}
}

// reclaimDataDir waits until no earlier server runs on dataDir. A server still
// named in postmaster.pid belonged to a wrapper that died (only one wrapper
// uses a data directory), so it is told to stop at once and, if it has not
// within timeout, killed.
func reclaimDataDir(dataDir string, timeout time.Duration) error {
	b, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 || !isPostgres(pid) {
		return nil // stale file: PostgreSQL itself removes it
	}
	_ = syscall.Kill(pid, syscall.SIGQUIT)
	for _, next := range []syscall.Signal{syscall.SIGKILL, 0} {
		deadline := time.Now().Add(timeout)
		for isPostgres(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if !isPostgres(pid) {
			return nil
		}
		if next != 0 {
			_ = syscall.Kill(pid, next)
		}
	}
	return fmt.Errorf("an earlier PostgreSQL (pid %d) still runs on %s after SIGQUIT and SIGKILL", pid, dataDir)
}

// isPostgres says whether pid is a live (not zombie) postgres process; a
// container's init may never reap the orphan, so a zombie counts as gone.
func isPostgres(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if _, rest, ok := strings.Cut(string(stat), ") "); ok && strings.HasPrefix(rest, "Z") {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	argv0, _, _ := strings.Cut(string(cmdline), "\x00")
	return filepath.Base(argv0) == "postgres"
}

// credentialFor is nil unless we are root, which PostgreSQL refuses to run as.
func credentialFor(name string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user %q (Debian's postgresql package creates it): %w", name, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, err
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tail(b []byte) string {
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}
