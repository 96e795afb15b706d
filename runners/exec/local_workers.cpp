#include "runners/exec/local_workers.hpp"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "runners/store/identity.hpp"

extern char** environ;  // NOLINT(readability-redundant-declaration): POSIX declares it in no header

namespace wbaudit::runners {
namespace {

using Clock = std::chrono::steady_clock;

std::string errno_text(int error) {
  return std::strerror(error);
}

// An owned file descriptor, closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : m_fd(fd) {}
  Fd(Fd&& other) noexcept : m_fd(std::exchange(other.m_fd, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      close();
      m_fd = std::exchange(other.m_fd, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { close(); }
  int get() const { return m_fd; }
  bool open() const { return m_fd >= 0; }
  void close() {
    if (m_fd >= 0) {
      ::close(m_fd);
      m_fd = -1;
    }
  }

 private:
  int m_fd = -1;
};

// A close-on-exec pipe whose ends are both above the standard descriptors: dup2 of an end onto the child's stdin or
// stdout must never be a dup2 onto itself, which would keep FD_CLOEXEC and close it at exec.
std::pair<Fd, Fd> make_pipe() {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    throw WorkerError("cannot create a pipe for a worker process: " + errno_text(errno));
  }
  Fd ends[2] = {Fd(fds[0]), Fd(fds[1])};
  for (Fd& end : ends) {
    if (end.get() < 3) {
      const int moved = ::fcntl(end.get(), F_DUPFD_CLOEXEC, 3);
      if (moved < 0) {
        throw WorkerError("cannot move a pipe end above the standard descriptors: " + errno_text(errno));
      }
      end = Fd(moved);
    }
  }
  return {std::move(ends[0]), std::move(ends[1])};
}

// Writes all of text. Returns false when the reader is gone (EPIPE): SIGPIPE is blocked in this thread for the
// write, and the one the write raised is consumed, so that a dead worker (or parent) cannot kill the writer.
bool write_all(int fd, const std::string& text) {
  sigset_t pipe_signal, previous;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, &previous);
  std::size_t written = 0;
  int error = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n < 0) {
      if (errno == EINTR) {
        continue;
      }
      error = errno;
      break;
    }
    written += static_cast<std::size_t>(n);
  }
  if (error == EPIPE && !sigismember(&previous, SIGPIPE)) {
    const timespec no_wait{0, 0};
    (void)sigtimedwait(&pipe_signal, nullptr, &no_wait);
  }
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
  if (error == EPIPE) {
    return false;
  }
  if (error != 0) {
    throw WorkerError("cannot write to a worker pipe: " + errno_text(error));
  }
  return true;
}

// One protocol line. Invalid UTF-8 (e.g. in a path inside an error message) is replaced rather than thrown on.
std::string protocol_line(const nlohmann::json& message) {
  return message.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

// "exited with status 1", "was killed by signal 9 (Killed)".
std::string describe_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    const int signal = WTERMSIG(status);
    return "was killed by signal " + std::to_string(signal) + " (" + ::strsignal(signal) + ")";
  }
  if (WIFEXITED(status)) {
    return "exited with status " + std::to_string(WEXITSTATUS(status));
  }
  return "ended with wait status " + std::to_string(status);
}

struct Worker {
  pid_t pid = -1;                   // -1 once reaped
  Fd input;                         // our end of its stdin
  Fd output;                        // our end of its stdout
  std::string received;             // bytes after the last complete line
  bool ready = false;               // sent "ready"
  bool discard = false;             // broke the protocol and was killed: its further lines are ignored
  std::optional<std::size_t> cell;  // index into the cells of the cell it holds
  std::string attempt;              // that cell's attempt uuid, once started
  Clock::time_point since;          // when it started that cell
};

// The worker processes of one execute_sweep call. Whatever is still alive when this goes away (the parent threw)
// is killed and reaped, so that no worker outlives the call as an orphan or a zombie.
class WorkerSet {
 public:
  explicit WorkerSet(const std::vector<std::string>& command) : m_command(command) {
    for (const auto& word : m_command) {
      m_command_text += (m_command_text.empty() ? "" : " ") + word;
    }
  }
  WorkerSet(const WorkerSet&) = delete;
  WorkerSet& operator=(const WorkerSet&) = delete;
  ~WorkerSet() {
    for (auto& worker : m_workers) {
      worker->input.close();
      worker->output.close();
      if (worker->pid > 0) {
        ::kill(worker->pid, SIGKILL);
        (void)reap(*worker);
      }
    }
  }

  const std::string& command_text() const { return m_command_text; }
  std::vector<std::unique_ptr<Worker>>& workers() { return m_workers; }

  Worker& spawn() {
    auto [child_stdin, input] = make_pipe();
    auto [output, child_stdout] = make_pipe();
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, child_stdin.get(), STDIN_FILENO);
    posix_spawn_file_actions_adddup2(&actions, child_stdout.get(), STDOUT_FILENO);
    // The worker starts with no blocked signals and SIGPIPE at its default, whatever this thread has set.
    posix_spawnattr_t attributes;
    posix_spawnattr_init(&attributes);
    sigset_t none, defaults;
    sigemptyset(&none);
    sigemptyset(&defaults);
    sigaddset(&defaults, SIGPIPE);
    posix_spawnattr_setsigmask(&attributes, &none);
    posix_spawnattr_setsigdefault(&attributes, &defaults);
    posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
    std::vector<char*> argv;
    for (const auto& word : m_command) {
      argv.push_back(const_cast<char*>(word.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast): execv API
    }
    argv.push_back(nullptr);
    pid_t pid = -1;
    const int rc = ::posix_spawn(&pid, argv[0], &actions, &attributes, argv.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attributes);
    if (rc != 0) {
      throw WorkerError("cannot start the worker process " + m_command_text + ": " + errno_text(rc));
    }
    auto worker = std::make_unique<Worker>();
    worker->pid = pid;
    worker->input = std::move(input);
    worker->output = std::move(output);
    m_workers.push_back(std::move(worker));
    return *m_workers.back();
  }

  // Waits for a worker that has exited or is about to (its stdout reached end of file); returns the wait status.
  static int reap(Worker& worker) {
    int status = 0;
    while (::waitpid(worker.pid, &status, 0) < 0) {
      if (errno != EINTR) {
        status = 0;
        break;
      }
    }
    worker.pid = -1;
    return status;
  }

 private:
  std::vector<std::string> m_command;
  std::string m_command_text;
  std::vector<std::unique_ptr<Worker>> m_workers;
};

// The parent's side of one execute_sweep call.
class Dispatcher {
 public:
  Dispatcher(const SweepStore& store, const std::vector<CellTask>& cells, const std::vector<std::size_t>& todo,
             const ExecOptions& opts, ExecSummary& summary)
      : m_store(store), m_cells(cells), m_todo(todo), m_opts(opts), m_summary(summary), m_set(opts.worker_command) {}

  void run() {
    const auto jobs = std::min(static_cast<std::size_t>(m_opts.local_jobs), m_todo.size());
    for (std::size_t i = 0; i < jobs && m_error.empty(); ++i) {
      start_worker();
    }
    std::vector<pollfd> polled;
    std::vector<Worker*> polled_workers;
    while (true) {
      polled.clear();
      polled_workers.clear();
      for (auto& worker : m_set.workers()) {
        if (worker->output.open()) {
          polled.push_back({worker->output.get(), POLLIN, 0});
          polled_workers.push_back(worker.get());
        }
      }
      if (polled.empty()) {
        break;
      }
      if (::poll(polled.data(), polled.size(), -1) < 0) {
        if (errno == EINTR) {
          continue;
        }
        throw WorkerError("poll on the worker pipes failed: " + errno_text(errno));
      }
      for (std::size_t i = 0; i < polled.size(); ++i) {
        if (polled[i].revents != 0) {
          receive(*polled_workers[i]);
        }
      }
    }
    if (!m_error.empty()) {
      if (m_store_error) {
        throw StoreError(m_error);
      }
      throw WorkerError(m_error);
    }
    std::sort(m_failed.begin(), m_failed.end());
    m_summary.failed += m_failed.size();
    for (std::size_t i : m_failed) {
      m_summary.failed_ids.push_back(m_cells[i].id);
    }
  }

 private:
  void set_error(const std::string& message, bool store_error) {
    if (m_error.empty()) {
      m_error = message;
      m_store_error = store_error;
    }
  }

  static std::string name(const Worker& worker) { return "worker process " + std::to_string(worker.pid); }

  void start_worker() {
    try {
      hand_out(m_set.spawn());
    } catch (const WorkerError& e) {
      set_error(e.what(), false);  // the running workers finish their cells first
    }
  }

  // Gives an idle worker the next cell, or closes its stdin (it exits) when there is none or after an error.
  void hand_out(Worker& worker) {
    if (!m_error.empty() || m_next >= m_todo.size()) {
      worker.input.close();
      return;
    }
    worker.cell = m_todo[m_next++];
    worker.attempt.clear();
    worker.since = Clock::now();
    // A worker that died meanwhile is noticed at its end of file, with the cell it holds.
    (void)write_all(worker.input.get(), m_cells[*worker.cell].id + "\n");
  }

  void receive(Worker& worker) {
    char buffer[4096];
    ssize_t n = 0;
    do {
      n = ::read(worker.output.get(), buffer, sizeof buffer);
    } while (n < 0 && errno == EINTR);
    if (n <= 0) {
      finish(worker);
      return;
    }
    worker.received.append(buffer, static_cast<std::size_t>(n));
    std::size_t newline = 0;
    while ((newline = worker.received.find('\n')) != std::string::npos) {
      const std::string line = worker.received.substr(0, newline);
      worker.received.erase(0, newline + 1);
      if (!worker.discard) {
        handle(worker, line);
      }
    }
  }

  void protocol_error(Worker& worker, const std::string& what) {
    set_error(name(worker) + " (" + m_set.command_text() + ") broke the worker protocol: " + what, false);
    worker.discard = true;
    worker.cell.reset();
    worker.input.close();
    ::kill(worker.pid, SIGKILL);
  }

  void handle(Worker& worker, const std::string& line) {
    nlohmann::json message;
    try {
      message = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      protocol_error(worker, "unreadable line \"" + line.substr(0, 200) + "\"");
      return;
    }
    std::string event;
    if (message.is_object() && message.contains("event") && message["event"].is_string()) {
      event = message["event"].get<std::string>();
    }
    if (event == "ready") {
      worker.ready = true;
      return;
    }
    if (event == "error") {
      set_error(name(worker) + ": " + message.value("message", std::string("(no message)")), true);
      worker.cell.reset();  // its cell is neither completed nor failed: the sweep stops with this error
      worker.input.close();
      return;
    }
    if (event != "started" && event != "finished") {
      protocol_error(worker, "unknown message " + line.substr(0, 200));
      return;
    }
    if (!worker.ready || !worker.cell || message.value("cell", std::string()) != m_cells[*worker.cell].id) {
      protocol_error(worker, "\"" + event + "\" for a cell it does not hold: " + line.substr(0, 200));
      return;
    }
    const CellTask& task = m_cells[*worker.cell];
    try {
      if (event == "started") {
        worker.attempt = message.at("attempt").get<std::string>();
        worker.since = Clock::now();
        if (m_opts.progress) {
          m_opts.progress({ProgressEvent::Kind::started, task.id, task.name, "", worker.attempt, 0, 0.0});
        }
        return;
      }
      const bool ok = message.at("ok").get<bool>();
      const double seconds = message.at("seconds").get<double>();
      const std::string reason = message.at("message").get<std::string>();
      m_summary.cell_seconds += seconds;
      if (ok) {
        ++m_summary.completed;
      } else {
        m_failed.push_back(*worker.cell);
      }
      worker.cell.reset();
      if (m_opts.progress) {
        m_opts.progress({ok ? ProgressEvent::Kind::completed : ProgressEvent::Kind::failed, task.id, task.name, reason,
                         worker.attempt, 0, seconds});
      }
    } catch (const nlohmann::json::exception& e) {
      protocol_error(worker,
                     std::string("malformed \"") + event + "\" message " + line.substr(0, 200) + ": " + e.what());
      return;
    }
    hand_out(worker);
  }

  // The worker's stdout reached end of file: it exited (or is exiting). Reap it and account for what it held.
  void finish(Worker& worker) {
    worker.output.close();
    worker.input.close();
    const pid_t pid = worker.pid;
    const int status = WorkerSet::reap(worker);
    const std::string who = "worker process " + std::to_string(pid);
    if (!worker.ready) {
      set_error(who + " (" + m_set.command_text() + ") " + describe_wait_status(status) +
                    " before it was ready (see its messages above)",
                false);
      return;
    }
    if (!worker.cell) {
      const bool clean = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      if (!clean && !worker.discard && m_error.empty()) {
        std::cerr << "wbaudit: warning: " << who << " " << describe_wait_status(status)
                  << " after its last cell (the cells it ran are recorded)\n";
      }
      return;
    }
    // It died holding a cell: the cell failed; its attempt, if begun, says why instead of "running".
    const CellTask& task = m_cells[*worker.cell];
    const bool begun = !worker.attempt.empty();
    const std::string reason =
        who + " " + describe_wait_status(status) + (begun ? " while running the cell" : " before it began the cell");
    const double seconds = begun ? std::chrono::duration<double>(Clock::now() - worker.since).count() : 0.0;
    if (begun) {
      try {
        (void)m_store.fail_abandoned_attempt(task.id, worker.attempt, reason);
      } catch (const StoreError& e) {
        set_error(e.what(), true);
      }
    }
    m_summary.cell_seconds += seconds;
    m_failed.push_back(*worker.cell);
    worker.cell.reset();
    if (m_opts.progress) {
      if (!begun) {
        m_opts.progress({ProgressEvent::Kind::started, task.id, task.name, "", "", 0, 0.0});
      }
      m_opts.progress({ProgressEvent::Kind::failed, task.id, task.name, reason, worker.attempt, 0, seconds});
    }
    if (m_error.empty() && m_next < m_todo.size()) {
      start_worker();  // a replacement
    }
  }

  const SweepStore& m_store;
  const std::vector<CellTask>& m_cells;
  const std::vector<std::size_t>& m_todo;
  const ExecOptions& m_opts;
  ExecSummary& m_summary;
  WorkerSet m_set;
  std::size_t m_next = 0;             // next index into m_todo
  std::vector<std::size_t> m_failed;  // indices into m_cells
  std::string m_error;                // the first error; no cells are handed out after it
  bool m_store_error = false;         // m_error is a store error reported by a worker
};

// Lines from a file descriptor; the last line counts only when it ends with a newline.
class LineReader {
 public:
  explicit LineReader(int fd) : m_fd(fd) {}
  bool next(std::string& line) {
    while (true) {
      if (const auto newline = m_buffer.find('\n'); newline != std::string::npos) {
        line = m_buffer.substr(0, newline);
        m_buffer.erase(0, newline + 1);
        return true;
      }
      char chunk[4096];
      const ssize_t n = ::read(m_fd, chunk, sizeof chunk);
      if (n < 0 && errno == EINTR) {
        continue;
      }
      if (n < 0) {
        throw WorkerError("worker: cannot read stdin: " + errno_text(errno));
      }
      if (n == 0) {
        return false;
      }
      m_buffer.append(chunk, static_cast<std::size_t>(n));
    }
  }

 private:
  int m_fd;
  std::string m_buffer;
};

}  // namespace

bool serve_cells(const SweepStore& store, const CellFn& fn) {
  // If the parent dies (even by SIGKILL) the worker goes too instead of finishing its cell as an orphan. A parent
  // that died before this line is noticed at the end of the current cell, when stdin reaches end of file.
  (void)::prctl(PR_SET_PDEATHSIG, SIGKILL);
  std::cout.flush();
  Fd answers(::fcntl(STDOUT_FILENO, F_DUPFD_CLOEXEC, 3));
  if (!answers.open() || ::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
    throw WorkerError("worker: cannot set up its answer channel on stdout: " + errno_text(errno));
  }
  const auto send = [&answers](const nlohmann::json& message) {
    if (!write_all(answers.get(), protocol_line(message))) {
      throw WorkerError("worker: the parent closed its end of the answer pipe");
    }
  };
  try {
    if (self_executable_sha256() != store.binary_sha256()) {
      throw StoreError("this executable (" + self_executable().string() + ", hash " + self_executable_sha256() +
                       ") is not the sweep's registered binary (hash " + store.binary_sha256() + ")");
    }
    send({{"event", "ready"}, {"pid", static_cast<long long>(::getpid())}});
    const auto progress = [&send](const ProgressEvent& e) {
      if (e.kind == ProgressEvent::Kind::started) {
        send({{"event", "started"}, {"cell", e.cell_id}, {"attempt", e.attempt}});
      } else {
        send({{"event", "finished"},
              {"cell", e.cell_id},
              {"ok", e.kind == ProgressEvent::Kind::completed},
              {"seconds", e.seconds},
              {"message", e.message}});
      }
    };
    LineReader requests(STDIN_FILENO);
    std::string id;
    while (requests.next(id)) {
      const StoredCell& cell = store.cell(id);
      double seconds = 0.0;
      (void)run_cell_attempt(store, {cell.id, cell.name, cell.config}, fn, progress, 0, seconds);
    }
    return true;
  } catch (const std::exception& e) {
    try {
      send({{"event", "error"}, {"message", e.what()}});
    } catch (const std::exception&) {
      // The parent is gone; nobody is left to tell.
    }
    return false;
  }
}

namespace detail {

void run_in_local_workers(const SweepStore& store, const std::vector<CellTask>& cells,
                          const std::vector<std::size_t>& todo, const ExecOptions& opts, ExecSummary& summary) {
  if (opts.worker_command.empty() || opts.worker_command.front().empty()) {
    throw std::invalid_argument("execute_sweep: local_jobs = " + std::to_string(opts.local_jobs) +
                                " needs a worker_command");
  }
  Dispatcher(store, cells, todo, opts, summary).run();
}

}  // namespace detail
}  // namespace wbaudit::runners
