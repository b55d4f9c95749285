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
// The server gets SIGTERM (a fast, clean shutdown) if this process dies, even
// by SIGKILL, through the parent-death signal, so it never outlives us.
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
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGTERM, Setpgid: true}
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
	return pg, nil
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
