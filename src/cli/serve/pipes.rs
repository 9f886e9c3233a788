//! `serve --stdio`'s input and output. rmcp's stdio reads and writes on tokio's blocking
//! pool: every message crosses to another thread and back. When the client gave pipes
//! (Python, rmcp) or socket pairs (Node's libuv), tokio's reactor drives them directly.
//! Anything else (a terminal, a file) keeps the blocking pool.
//!
//! Non-blocking mode belongs to the file description, which another standard stream
//! may share (`2>&1`, one socket for all three): a stream that is the same file as
//! another one stays as it is, so that no blocking write (the log's) meets `EAGAIN`.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use tokio::io::{AsyncRead, AsyncWrite};

pub(crate) type Input = Box<dyn AsyncRead + Send + Unpin>;
pub(crate) type Output = Box<dyn AsyncWrite + Send + Unpin>;

/// stdin and stdout for the MCP service.
pub(crate) fn stdio() -> (Input, Output) {
    let (stdin, stdout, stderr) = (std::io::stdin(), std::io::stdout(), std::io::stderr());
    let [input_file, output_file, log_file] =
        [stdin.as_fd(), stdout.as_fd(), stderr.as_fd()].map(file_of);
    let alone = |file: Option<(u64, u64)>, others: [Option<(u64, u64)>; 2]| {
        file.is_some() && others.iter().all(|other| other.is_some() && *other != file)
    };
    let input = stream(stdin.as_fd())
        .filter(|_| alone(input_file, [output_file, log_file]))
        .and_then(|fd| readable(fd).ok())
        .unwrap_or_else(|| Box::new(tokio::io::stdin()));
    let output = stream(stdout.as_fd())
        .filter(|_| alone(output_file, [input_file, log_file]))
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

/// Which file `fd` is (device and inode), when it can be told.
fn file_of(fd: BorrowedFd<'_>) -> Option<(u64, u64)> {
    let stat = nix::sys::stat::fstat(fd).ok()?;
    Some((stat.st_dev, stat.st_ino))
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
