package pglocal

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	lockName    = ".poppyhost.lock"
	portName    = "poppyhost-port"
	logName     = "server.log"
	dataName    = "data"
	confName    = "poppyhost.conf"
	superuser   = "postgres"
	systemUser  = "postgres"
	defaultRoot = "/usr/lib/postgresql"

	// tailLines is how much command output or server log goes into errors:
	// enough to show the cause without burying it.
	tailLines = 20
	// maxSocketDir keeps "<dir>/.s.PGSQL.<port>" below the 107-byte limit
	// of a Unix socket path; PostgreSQL refuses to start otherwise.
	maxSocketDir = 90
	// startAttempts covers the small window in which another process may
	// grab the port we picked before postgres binds it.
	startAttempts = 3
	// defaultWait bounds pg_ctl -w when ctx has no deadline.
	defaultWait = 60 * time.Second
)

// notFoundMsg is the FindBinaries error text; it names the package to
// install because that is the only thing the user needs to do.
const notFoundMsg = "PostgreSQL server binaries (initdb, pg_ctl) not found; install them with: apt-get install postgresql"

// Binaries holds the paths of the PostgreSQL server programs, all taken from
// one directory so that their versions match (pg_ctl runs the postgres found
// next to itself).
type Binaries struct {
	// InitDB is the path of initdb.
	InitDB string
	// PGCtl is the path of pg_ctl.
	PGCtl string
	// Postgres is the path of the postgres server.
	Postgres string
}

// Options configures Start.
type Options struct {
	// Dir is the cluster directory (required). A relative path is made
	// absolute. When running as root, every parent of Dir must be
	// searchable (o+x) by the "postgres" system user, which runs the server.
	Dir string
	// Logger receives progress messages; nil discards them.
	Logger *slog.Logger
	// InstallWithApt makes Start run "apt-get install -y postgresql" when
	// the binaries are missing, provided it runs as root and apt-get exists.
	// Meant for dev mode only: tests must not install packages.
	InstallWithApt bool
}

// Cluster is a PostgreSQL server this process started (or found already
// running) in a data directory.
type Cluster struct {
	dir     string
	dataDir string
	port    int
	bins    Binaries
	cred    *syscall.Credential // nil: run programs as ourselves
	logger  *slog.Logger

	mu      sync.Mutex
	started bool // this process started the server and has not stopped it
}

// Start initialises the cluster with initdb when it has no PG_VERSION yet
// (trust authentication, superuser "postgres", UTF8, C locale), then starts
// it with pg_ctl, listening only on 127.0.0.1 on a free TCP port with its
// Unix socket in Dir, and waits until it accepts connections.
//
// If a server is already running from Dir (postmaster.pid present and the
// port recorded in Dir/poppyhost-port accepts connections), Start reuses it
// and Stop on the returned Cluster does nothing. An exclusive flock on
// Dir/.poppyhost.lock is held while starting, so that concurrent processes
// starting the same Dir do not race: the later ones reuse the first one's
// server.
//
// PostgreSQL refuses to run as root. When running as root, Start hands Dir
// (recursively) to the "postgres" system user and runs initdb and pg_ctl as
// that user; Dir's parents must then be searchable by it.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.Dir == "" {
		return nil, errors.New("pglocal: Options.Dir is required")
	}
	dir, err := filepath.Abs(opts.Dir)
	if err != nil {
		return nil, fmt.Errorf("pglocal: resolve %q: %w", opts.Dir, err)
	}
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("pglocal: create cluster dir: %w", err)
	}

	unlock, err := lockDir(ctx, dir)
	if err != nil {
		return nil, err
	}
	defer unlock()

	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, dataName),
		logger:  logger,
	}
	if port, ok := c.runningPort(ctx); ok {
		c.port = port
		logger.Info("reusing running PostgreSQL", "dir", dir, "port", port)
		return c, nil
	}

	if c.bins, err = findOrInstall(ctx, opts.InstallWithApt, logger); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	// Look the user up only after a possible apt-get install, which is
	// what creates the postgres user on Debian and Ubuntu.
	if c.cred, err = serverCredential(); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	if c.cred != nil {
		if err := checkSearchable(dir, c.cred); err != nil {
			return nil, fmt.Errorf("pglocal: %w", err)
		}
		if err := chownTree(dir, c.cred); err != nil {
			return nil, fmt.Errorf("pglocal: %w", err)
		}
	}

	if err := c.initIfNeeded(ctx); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	if err := c.start(ctx); err != nil {
		return nil, fmt.Errorf("pglocal: %w", err)
	}
	c.started = true
	return c, nil
}

// URL returns a pgx connection URL for database db as user postgres, e.g.
// postgres://postgres@127.0.0.1:PORT/db?sslmode=disable.
func (c *Cluster) URL(db string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.User(superuser),
		Host:     net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)),
		Path:     "/" + db,
		RawQuery: "sslmode=disable",
	}
	return u.String()
}

// Stop stops the server with "pg_ctl stop -m fast", but only if this
// process started it; otherwise (and on repeated calls) it does nothing.
func (c *Cluster) Stop(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.started {
		return nil
	}
	unlock, err := lockDir(ctx, c.dir)
	if err != nil {
		return err
	}
	defer unlock()

	// Someone may have stopped it behind our back; pg_ctl would fail then.
	if _, err := os.Stat(filepath.Join(c.dataDir, "postmaster.pid")); err == nil {
		out, err := c.run(ctx, c.bins.PGCtl, "stop", "-D", c.dataDir, "-m", "fast", "-w", "-s")
		if err != nil {
			return fmt.Errorf("pglocal: stop server in %s: %w\n%s", c.dir, err, lastLines(out, tailLines))
		}
	}
	// A stale port file would make the next Start probe a port that may by
	// then belong to something else.
	if err := os.Remove(filepath.Join(c.dir, portName)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("pglocal: remove port file: %w", err)
	}
	c.started = false
	c.logger.Info("stopped PostgreSQL", "dir", c.dir)
	return nil
}

// FindBinaries locates initdb, pg_ctl and postgres: first in the directories
// on PATH, then in the highest version under /usr/lib/postgresql/*/bin (where
// Debian and Ubuntu install them, off PATH). All three must be in the same
// directory.
func FindBinaries() (Binaries, error) {
	return findBinaries(defaultRoot)
}

// findBinaries is FindBinaries with the versioned install root as a
// parameter, so tests can point it somewhere empty.
func findBinaries(root string) (Binaries, error) {
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		// Relative entries would make the result depend on the working
		// directory, which os/exec also refuses to honour.
		if !filepath.IsAbs(d) {
			continue
		}
		if b, ok := binariesIn(d); ok {
			return b, nil
		}
	}

	dirs, err := filepath.Glob(filepath.Join(root, "*", "bin"))
	if err != nil {
		return Binaries{}, fmt.Errorf("search %s: %w", root, err)
	}
	slices.SortFunc(dirs, func(a, b string) int {
		// Descending: the newest server wins.
		return slices.Compare(versionOf(b), versionOf(a))
	})
	for _, d := range dirs {
		if b, ok := binariesIn(d); ok {
			return b, nil
		}
	}
	return Binaries{}, errors.New(notFoundMsg)
}

// binariesIn reports the server programs in dir if all of them are there.
func binariesIn(dir string) (Binaries, bool) {
	b := Binaries{
		InitDB:   filepath.Join(dir, "initdb"),
		PGCtl:    filepath.Join(dir, "pg_ctl"),
		Postgres: filepath.Join(dir, "postgres"),
	}
	for _, p := range []string{b.InitDB, b.PGCtl, b.Postgres} {
		info, err := os.Stat(p)
		if err != nil || !info.Mode().IsRegular() || info.Mode().Perm()&0o111 == 0 {
			return Binaries{}, false
		}
	}
	return b, true
}

// versionOf turns ".../15/bin" or ".../9.6/bin" into comparable numbers;
// unparsable parts count as 0 so odd directories sort last.
func versionOf(binDir string) []int {
	var v []int
	for part := range strings.SplitSeq(filepath.Base(filepath.Dir(binDir)), ".") {
		n, _ := strconv.Atoi(part)
		v = append(v, n)
	}
	return v
}

// findOrInstall finds the binaries, installing them with apt-get first when
// allowed and possible.
func findOrInstall(ctx context.Context, install bool, logger *slog.Logger) (Binaries, error) {
	bins, err := FindBinaries()
	if err == nil || !install || os.Geteuid() != 0 {
		return bins, err
	}
	apt, lookErr := exec.LookPath("apt-get")
	if lookErr != nil {
		return bins, err
	}
	logger.Info("PostgreSQL server binaries not found; installing them with apt-get install -y postgresql")
	if err := aptGet(ctx, logger, apt, "install", "-y", "postgresql"); err != nil {
		// Fresh containers usually ship without package lists.
		logger.Info("apt-get install failed; running apt-get update and retrying", "err", err)
		if err := aptGet(ctx, logger, apt, "update"); err != nil {
			return Binaries{}, err
		}
		if err := aptGet(ctx, logger, apt, "install", "-y", "postgresql"); err != nil {
			return Binaries{}, err
		}
	}
	return FindBinaries()
}

// aptGet runs apt-get non-interactively, forwarding its output to logger
// line by line so a user watching dev mode sees progress.
func aptGet(ctx context.Context, logger *slog.Logger, apt string, args ...string) error {
	cmd := exec.CommandContext(ctx, apt, args...)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	w := &lineLogger{logger: logger}
	cmd.Stdout = w
	cmd.Stderr = w
	err := cmd.Run()
	w.flush()
	if err != nil {
		return fmt.Errorf("apt-get %s: %w\n%s", strings.Join(args, " "), err, lastLines(w.all.Bytes(), tailLines))
	}
	return nil
}

// lineLogger is an io.Writer that logs each complete line it receives and
// keeps everything for error messages. os/exec serialises writes when the
// same *lineLogger is both Stdout and Stderr.
type lineLogger struct {
	logger  *slog.Logger
	pending []byte
	all     bytes.Buffer
}

// Write implements io.Writer.
func (l *lineLogger) Write(p []byte) (int, error) {
	l.all.Write(p)
	l.pending = append(l.pending, p...)
	for {
		i := bytes.IndexByte(l.pending, '\n')
		if i < 0 {
			return len(p), nil
		}
		if line := strings.TrimSpace(string(l.pending[:i])); line != "" {
			l.logger.Info("apt-get: " + line)
		}
		l.pending = l.pending[i+1:]
	}
}

// flush logs a final line that had no newline.
func (l *lineLogger) flush() {
	if line := strings.TrimSpace(string(l.pending)); line != "" {
		l.logger.Info("apt-get: " + line)
	}
	l.pending = nil
}

// serverCredential returns the identity to run PostgreSQL programs as: nil
// (ourselves) unless we are root, which initdb and postgres refuse to run as.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup(systemUser)
	if err != nil {
		return nil, fmt.Errorf("running as root, which PostgreSQL refuses, and there is no %q system user to run it as instead; create one (useradd --system --user-group --no-create-home %s) or run as a non-root user: %w", systemUser, systemUser, err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse uid of user %s: %w", systemUser, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("parse gid of user %s: %w", systemUser, err)
	}
	// Groups stays empty: supplementary groups are dropped, which is what
	// checkSearchable assumes.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// checkSearchable fails early, with a useful message, when the server user
// could not reach dir because some parent lacks search permission for it;
// initdb's own error ("could not change directory ...") hides the cause.
func checkSearchable(dir string, cred *syscall.Credential) error {
	for p := filepath.Dir(dir); ; p = filepath.Dir(p) {
		info, err := os.Stat(p)
		if err != nil {
			return fmt.Errorf("stat %s: %w", p, err)
		}
		st, ok := info.Sys().(*syscall.Stat_t)
		if !ok {
			return nil // not a Unix stat; let PostgreSQL find out
		}
		perm := info.Mode().Perm()
		var bit fs.FileMode = 0o001
		switch {
		case st.Uid == cred.Uid:
			bit = 0o100
		case st.Gid == cred.Gid:
			bit = 0o010
		}
		if perm&bit == 0 {
			return fmt.Errorf("PostgreSQL runs as system user %q (we are root) and that user cannot enter %s (mode %v); make every parent of %s searchable (e.g. chmod o+x %s) or use another directory", systemUser, p, perm, dir, p)
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}

// chownTree hands dir and everything below it to the server user, so files
// created by root (lock, port and config files, or an earlier run as root
// before this handling existed) do not lock the server out.
func chownTree(dir string, cred *syscall.Credential) error {
	err := filepath.WalkDir(dir, func(path string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(path, int(cred.Uid), int(cred.Gid))
	})
	if err != nil {
		return fmt.Errorf("give %s to user %s: %w", dir, systemUser, err)
	}
	return nil
}

// lockDir takes the exclusive start/stop lock on dir, polling so that ctx
// can cancel the wait (flock itself cannot be interrupted).
func lockDir(ctx context.Context, dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, lockName), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pglocal: open lock file: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			// Closing the file releases the lock.
			return func() { _ = f.Close() }, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			_ = f.Close()
			return nil, fmt.Errorf("pglocal: lock %s: %w", dir, err)
		}
		select {
		case <-ctx.Done():
			_ = f.Close()
			return nil, fmt.Errorf("pglocal: wait for lock on %s: %w", dir, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// runningPort reports the port of a server already running from the
// cluster directory, if there is one.
func (c *Cluster) runningPort(ctx context.Context) (int, bool) {
	raw, err := os.ReadFile(filepath.Join(c.dir, portName))
	if err != nil {
		return 0, false
	}
	port, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil || port <= 0 || port > 65535 {
		return 0, false
	}
	pid, err := os.ReadFile(filepath.Join(c.dataDir, "postmaster.pid"))
	if err != nil {
		return 0, false
	}
	// Line 4 of postmaster.pid is the port; a mismatch means the port file
	// is stale and whatever answers on that port is not our server.
	if lines := strings.Split(string(pid), "\n"); len(lines) >= 4 {
		if p, err := strconv.Atoi(strings.TrimSpace(lines[3])); err == nil && p != port {
			return 0, false
		}
	}
	if !accepts(ctx, port, time.Second) {
		return 0, false
	}
	return port, true
}

// initIfNeeded runs initdb unless the data directory is already
// initialised. initdb writes to a scratch directory that is renamed into
// place at the end, so PG_VERSION in data/ always means a complete cluster.
func (c *Cluster) initIfNeeded(ctx context.Context) error {
	if _, err := os.Stat(filepath.Join(c.dataDir, "PG_VERSION")); err == nil {
		return nil
	}
	// An empty data/ (e.g. created by hand) is harmless; anything else
	// without PG_VERSION is not ours to delete.
	if err := os.Remove(c.dataDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%s exists but is not an initialised PostgreSQL data directory (no PG_VERSION); remove it to start over: %w", c.dataDir, err)
	}

	scratch := filepath.Join(c.dir, dataName+".initdb")
	if err := os.RemoveAll(scratch); err != nil {
		return fmt.Errorf("remove leftover %s: %w", scratch, err)
	}
	c.logger.Info("initialising PostgreSQL cluster", "dir", c.dir, "initdb", c.bins.InitDB)
	out, err := c.run(ctx, c.bins.InitDB,
		"-D", scratch,
		"-U", superuser,
		"-A", "trust",
		"-E", "UTF8",
		// The C locale always exists, unlike whatever LANG says.
		"--locale=C",
		// Durability of a freshly created cluster is irrelevant here.
		"--no-sync",
	)
	if err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, lastLines(out, tailLines))
	}

	// Per-start settings (the port changes every start) live in their own
	// file, rewritten by start, so postgresql.conf is edited only once.
	conf, err := os.OpenFile(filepath.Join(scratch, "postgresql.conf"), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return fmt.Errorf("open postgresql.conf: %w", err)
	}
	_, err = fmt.Fprintf(conf, "\n# Added by poppyhost (pglocal): settings chosen at each start.\ninclude_if_exists = '%s'\n", confName)
	if closeErr := conf.Close(); err == nil {
		err = closeErr
	}
	if err != nil {
		return fmt.Errorf("append to postgresql.conf: %w", err)
	}

	if err := os.Rename(scratch, c.dataDir); err != nil {
		return fmt.Errorf("move initialised cluster into place: %w", err)
	}
	return nil
}

// start writes the per-start settings and starts the server with pg_ctl,
// retrying with a new port if the chosen one was taken in the meantime.
func (c *Cluster) start(ctx context.Context) error {
	logPath := filepath.Join(c.dir, logName)
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			return err
		}
		if err := c.writeServerConf(port); err != nil {
			return err
		}
		var logStart int64
		if info, err := os.Stat(logPath); err == nil {
			logStart = info.Size()
		}

		c.logger.Info("starting PostgreSQL", "dir", c.dir, "port", port)
		out, err := c.run(ctx, c.bins.PGCtl,
			"start",
			"-D", c.dataDir,
			"-l", logPath,
			"-w", "-t", strconv.Itoa(waitSeconds(ctx)),
			"-s",
		)
		if err != nil {
			serverLog := readFrom(logPath, logStart)
			if attempt < startAttempts && strings.Contains(string(serverLog), "already in use") {
				c.logger.Info("port taken before PostgreSQL could bind it; retrying", "port", port)
				continue
			}
			return fmt.Errorf("pg_ctl start: %w\n%s\nlast lines of %s:\n%s",
				err, lastLines(out, tailLines), logPath, lastLines(serverLog, tailLines))
		}

		// pg_ctl -w already waited for the server to report ready; this
		// confirms the TCP listener specifically, which is what clients use.
		if err := waitAccepting(ctx, port); err != nil {
			return err
		}
		if err := writeAtomic(filepath.Join(c.dir, portName), []byte(strconv.Itoa(port)+"\n")); err != nil {
			return fmt.Errorf("record port: %w", err)
		}
		c.port = port
		c.logger.Info("PostgreSQL ready", "dir", c.dir, "port", port)
		return nil
	}
}

// writeServerConf writes data/poppyhost.conf, included from
// postgresql.conf, with this start's connection settings.
func (c *Cluster) writeServerConf(port int) error {
	socketDir := c.dir
	if len(socketDir) > maxSocketDir {
		c.logger.Info("cluster dir path too long for a Unix socket; TCP only", "dir", c.dir)
		socketDir = ""
	}
	conf := fmt.Sprintf("# Written by poppyhost (pglocal) at each start; do not edit.\n"+
		"listen_addresses = '127.0.0.1'\n"+
		"port = %d\n"+
		"unix_socket_directories = %s\n",
		port, confQuote(socketDir))
	path := filepath.Join(c.dataDir, confName)
	if err := writeAtomic(path, []byte(conf)); err != nil {
		return fmt.Errorf("write %s: %w", confName, err)
	}
	if c.cred != nil {
		if err := os.Lchown(path, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("chown %s: %w", confName, err)
		}
	}
	return nil
}

// run runs a PostgreSQL program as the server user, from the cluster
// directory (the server user may not be able to enter our working
// directory), and returns its combined output.
func (c *Cluster) run(ctx context.Context, program string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, program, args...)
	cmd.Dir = c.dir
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	// pg_ctl's server child redirects its output to the log file, but if a
	// descendant ever kept our pipe open, Wait must not hang forever.
	cmd.WaitDelay = 5 * time.Second
	if c.cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	}
	err := cmd.Run()
	return out.Bytes(), err
}

// freePort asks the kernel for a currently unused loopback port.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find free port: %w", err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	if err := ln.Close(); err != nil {
		return 0, fmt.Errorf("release probe port: %w", err)
	}
	return port, nil
}

// waitSeconds converts ctx's remaining time into pg_ctl's -t argument.
func waitSeconds(ctx context.Context) int {
	wait := defaultWait
	if deadline, ok := ctx.Deadline(); ok {
		wait = time.Until(deadline)
	}
	return max(1, int((wait+time.Second-1)/time.Second))
}

// accepts reports whether something accepts TCP connections on the
// loopback port.
func accepts(ctx context.Context, port int, timeout time.Duration) bool {
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	_ = conn.Close()
	return true
}

// waitAccepting polls the port until it accepts connections or ctx ends.
func waitAccepting(ctx context.Context, port int) error {
	for {
		if accepts(ctx, port, time.Second) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for PostgreSQL on port %d: %w", port, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// confQuote quotes s as a postgresql.conf string value.
func confQuote(s string) string {
	s = strings.ReplaceAll(s, `\`, `\\`)
	s = strings.ReplaceAll(s, `'`, `''`)
	return "'" + s + "'"
}

// writeAtomic replaces path with data via a temporary file and rename, so
// a concurrent reader never sees a partial file.
func writeAtomic(path string, data []byte) (err error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return fmt.Errorf("create temp file: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tmp.Close()
			_ = os.Remove(tmp.Name())
		}
	}()
	if err := tmp.Chmod(0o644); err != nil {
		return fmt.Errorf("chmod temp file: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		return fmt.Errorf("write temp file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close temp file: %w", err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename temp file: %w", err)
	}
	return nil
}

// readFrom returns the contents of path from offset on, or nil if it
// cannot be read (it only feeds error messages).
func readFrom(path string, offset int64) []byte {
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	if _, err := f.Seek(offset, io.SeekStart); err != nil {
		return nil
	}
	b, _ := io.ReadAll(f)
	return b
}

// lastLines returns at most the last n lines of out, indented so they read
// as a quoted block inside an error message.
func lastLines(out []byte, n int) string {
	var lines []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		lines = append(lines, "    "+sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	if len(lines) == 0 {
		return "    (no output)"
	}
	return strings.Join(lines, "\n")
}
