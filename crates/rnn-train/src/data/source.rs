//! Data files that may be gzip-compressed (detected from their first bytes, not their
//! name), read as a stream: a reader asks for the number of bytes it expects and stops
//! there, so a small compressed file that inflates to gigabytes (a "gzip bomb") is never
//! inflated beyond what the format's header promises or a documented limit.

use std::fs::File;
use std::io::{self, BufReader, Cursor, Read};
use std::path::{Path, PathBuf};

use rnn_core::{Error, Result};

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// The decompressed bytes of a file or an in-memory blob, read on demand.
pub(crate) struct DataReader {
    origin: PathBuf,
    gzip: bool,
    inner: Box<dyn Read>,
}

impl DataReader {
    /// Opens `path`; `Error::Io` when it cannot be read.
    pub(crate) fn open(path: &Path) -> Result<DataReader> {
        let file = File::open(path).map_err(|e| Error::io(path, e))?;
        DataReader::new(path, BufReader::new(file))
    }

    /// Reads `bytes` (built-in data); `origin` names it in errors.
    pub(crate) fn from_static(origin: &Path, bytes: &'static [u8]) -> Result<DataReader> {
        DataReader::new(origin, bytes)
    }

    /// Reads `raw`; `origin` names it in errors.
    pub(crate) fn new(origin: &Path, mut raw: impl Read + 'static) -> Result<DataReader> {
        let mut head = [0u8; 2];
        let got = fill(&mut raw, &mut head).map_err(|e| Error::io(origin, e))?;
        let stream = Cursor::new(head[..got].to_vec()).chain(raw);
        let gzip = head[..got] == GZIP_MAGIC;
        let inner: Box<dyn Read> =
            if gzip { Box::new(flate2::read::MultiGzDecoder::new(stream)) } else { Box::new(stream) };
        Ok(DataReader { origin: origin.to_path_buf(), gzip, inner })
    }

    pub(crate) fn origin(&self) -> &Path {
        &self.origin
    }

    /// Fills `buf` as far as the data goes; returns how many bytes it holds.
    pub(crate) fn read_up_to(&mut self, buf: &mut [u8]) -> Result<usize> {
        fill(&mut self.inner, buf).map_err(|e| self.error(e))
    }

    /// The next `len` bytes, or fewer when the data ends first. The buffer grows with the
    /// data actually read, so a header that promises more than there is costs no memory.
    pub(crate) fn read_at_most(&mut self, len: usize) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        (&mut self.inner).take(len as u64).read_to_end(&mut out).map_err(|e| self.error(e))?;
        Ok(out)
    }

    /// Whether the data has ended (reads at most one more byte).
    pub(crate) fn at_end(&mut self) -> Result<bool> {
        Ok(self.read_up_to(&mut [0u8; 1])? == 0)
    }

    fn error(&self, e: io::Error) -> Error {
        if self.gzip && e.kind() != io::ErrorKind::OutOfMemory {
            Error::bad_file(&self.origin, format!("corrupt gzip data: {e}"))
        } else {
            Error::io(&self.origin, e)
        }
    }
}

/// Reads into `buf` until it is full or the stream ends.
fn fill(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;
    use std::io::{Read, Write};
    use std::rc::Rc;

    /// A reader over `bytes` that counts how many of them were read.
    #[derive(Clone)]
    pub(crate) struct CountingReader {
        data: Rc<Vec<u8>>,
        consumed: Rc<Cell<usize>>,
        position: usize,
    }

    impl CountingReader {
        pub(crate) fn new(bytes: Vec<u8>) -> Self {
            CountingReader { data: Rc::new(bytes), consumed: Rc::default(), position: 0 }
        }

        pub(crate) fn consumed(&self) -> usize {
            self.consumed.get()
        }
    }

    impl Read for CountingReader {
        fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
            let all = &self.data;
            let n = buf.len().min(all.len() - self.position);
            buf[..n].copy_from_slice(&all[self.position..self.position + n]);
            self.position += n;
            self.consumed.set(self.position);
            Ok(n)
        }
    }

    /// `head` followed by 1 GiB of zeros, as 64 concatenated gzip members of 16 MiB each
    /// (about 1 MiB compressed); returns the bytes and the inflated size.
    pub(crate) fn gzip_bomb(head: &[u8]) -> (Vec<u8>, usize) {
        const MEMBER: usize = 16 << 20;
        let gzip = |bytes: &[u8]| {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(bytes).unwrap();
            enc.finish().unwrap()
        };
        let zeros = gzip(&vec![0u8; MEMBER]);
        let mut bomb = gzip(head);
        (0..64).for_each(|_| bomb.extend_from_slice(&zeros));
        (bomb, head.len() + 64 * MEMBER)
    }
}
