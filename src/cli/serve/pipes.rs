//! `serve --stdio`'s input and output. rmcp's stdio reads and writes on tokio's blocking
//! pool: every message crosses to another thread and back. When the client gave pipes
//! (Python, rmcp) or socket pairs (Node's libuv), tokio's reactor drives them directly.
//! Anything else (a terminal, a file) keeps the blocking pool.
//!
//! Non-blocking mode belongs to the file description, which a stderr that is the same
//! file as stdout (`2>&1`) shares: then stdout stays as it is, so that the log's writes
//! never meet `EAGAIN`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tokio::io::{AsyncRead, AsyncWrite};

pub(crate) type Input = Box<dyn AsyncRead + Send + Unpin>;
pub(crate) type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout for the MCP service.
pub(crate) fn stdio() -> (Input, Output) {
    let input = stream(std::io::stdin().as_fd())
        .and_then(|fd| readable(fd).ok())
        .unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let output = stream(std::io::stdout().as_fd())
        .filter(|_| !shared_with_stderr())
        .and_then(|fd| writable(fd).ok())
        .unwrap_or_else(|| Box::new(tokio::io::stdout()));
    (input, output)
}

enum Stream {
    Pipe(OwnedFd),
    Socket(OwnedFd),
}

/// A copy of `fd` when it is a pipe or a socket.
fn stream(fd: BorrowedFd<'_>) -> Option<Stream> {
    use nix::sys::stat::{SFlag, fstat};
    let kind = SFlag::from_bits_truncate(fstat(fd).ok()?.st_mode) & SFlag::S_IFMT;
    let copy = fd.try_clone_to_owned().ok()?;
    match kind {
        SFlag::S_IFIFO => Some(Stream::Pipe(copy)),
        SFlag::S_IFSOCK if local_stream(fd) => Some(Stream::Socket(copy)),
        _ => None,
    }
}

/// A Unix stream socket (one end of a socket pair), not a network or datagram one.
fn local_stream(fd: BorrowedFd<'_>) -> bool {
    use rustix::net::{AddressFamily, SocketType, getsockname, sockopt};
    let unix = getsockname(fd).is_ok_and(|a| a.address_family() == AddressFamily::UNIX);
    unix && sockopt::socket_type(fd).is_ok_and(|t| t == SocketType::STREAM)
}

fn shared_with_stderr() -> bool {
    use nix::sys::stat::fstat;
    let same = |a: nix::sys::stat::FileStat, b: nix::sys::stat::FileStat| {
        (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
    };
    match (
        fstat(std::io::stdout().as_fd()),
        fstat(std::io::stderr().as_fd()),
    ) {
        (Ok(out), Ok(err)) => same(out, err),
        _ => true,
    }
}

fn readable(stream: Stream) -> std::io::Result<Input> {
    Ok(match stream {
        Stream::Pipe(fd) => Box::new(tokio::net::unix::pipe::Receiver::from_owned_fd(fd)?),
        Stream::Socket(fd) => Box::new(socket(fd)?),
    })
}

fn writable(stream: Stream) -> std::io::Result<Output> {
    Ok(match stream {
        Stream::Pipe(fd) => Box::new(tokio::net::unix::pipe::Sender::from_owned_fd(fd)?),
        Stream::Socket(fd) => Box::new(socket(fd)?),
    })
}

fn socket(fd: OwnedFd) -> std::io::Result<tokio::net::UnixStream> {
    let socket = std::os::unix::net::UnixStream::from(fd);
    socket.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(socket)
}
