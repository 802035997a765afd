//! WAL frames written in one system call each.
//!
//! SQLite writes a WAL frame as two writes: the frame's 24-byte header, then its page right after
//! it. A commit of n pages is thus 2n `pwrite` calls, and a run commits a few dozen pages over its
//! life. This module registers a VFS, the default for every connection the process opens, that is
//! the platform's own except for WAL files: there it holds a frame's header until the page that
//! follows it arrives and writes both with one call — the same bytes at the same offsets, in the
//! same order, half the calls. Anything else asked of the file (a read, a sync, its size, a
//! write elsewhere, closing it) first writes a held header, so no one ever sees the file without
//! it; and SQLite always writes a frame's page right after its header, before it publishes the
//! frame in the WAL index.
//!
//! The only unsafe code of the store: it implements SQLite's C interface for files
//! (`sqlite3_vfs`, `sqlite3_io_methods`) and forwards every call to the platform's VFS.

use std::ffi::{c_char, c_int, c_void};
use std::mem::{align_of, size_of};
use std::ptr;
use std::sync::OnceLock;

use libsqlite3_sys as ffi;

/// The size of a WAL frame's header (`WAL_FRAME_HDRSIZE` in SQLite).
const FRAME_HEADER: usize = 24;

/// The same, as a distance between file offsets.
const FRAME_HEADER_SPAN: i64 = 24;

/// The VFS's name.
const NAME: &[u8] = b"flexrun-wal-frames\0";

/// The platform's VFS, which this one wraps (an address: `*mut sqlite3_vfs` is not `Sync`).
static PLATFORM: OnceLock<usize> = OnceLock::new();

/// Makes this VFS the default of every connection opened from now on; the first call registers
/// it, later ones do nothing. Whether it could be registered: if not, connections use the
/// platform's VFS as they would anyway.
pub fn install() -> bool {
    static INSTALLED: OnceLock<bool> = OnceLock::new();
    *INSTALLED.get_or_init(register)
}

fn register() -> bool {
    // SAFETY: `sqlite3_vfs_find(NULL)` returns the default VFS, which lives as long as the
    // process; the VFS registered here is leaked, so it does too, as SQLite requires.
    unsafe {
        let platform = ffi::sqlite3_vfs_find(ptr::null());
        if platform.is_null() {
            return false;
        }
        let Ok(wrapper) = usize::try_from((*platform).szOsFile) else { return false };
        let Ok(size) = c_int::try_from(inner_offset() + wrapper) else { return false };
        let mut vfs = *platform;
        vfs.szOsFile = size;
        vfs.zName = NAME.as_ptr().cast::<c_char>();
        vfs.pNext = ptr::null_mut();
        vfs.xOpen = Some(open);
        PLATFORM.get_or_init(|| platform.expose_provenance());
        ffi::sqlite3_vfs_register(Box::into_raw(Box::new(vfs)), 1) == ffi::SQLITE_OK
    }
}

/// A WAL file: the platform's file, and the header of the frame being written, held.
#[repr(C)]
struct WalFile {
    /// What SQLite sees: the methods below.
    base: ffi::sqlite3_file,
    /// The platform's file, in the same allocation, after this struct.
    inner: *mut ffi::sqlite3_file,
    /// Where the header written last and not yet passed on goes, if one is held.
    held: Option<i64>,
    header: [u8; FRAME_HEADER],
    /// A header and its page, assembled (kept, so a write allocates nothing once it has grown).
    joined: Vec<u8>,
}

/// Where the platform's file starts in the allocation SQLite makes for a file (`szOsFile`).
const fn inner_offset() -> usize {
    let align = align_of::<u64>();
    size_of::<WalFile>().div_ceil(align) * align
}

fn platform() -> *mut ffi::sqlite3_vfs {
    PLATFORM.get().map_or(ptr::null_mut(), |&address| ptr::with_exposed_provenance_mut(address))
}

/// `xOpen`: a WAL file is wrapped; any other file is the platform's own, in the same memory.
unsafe extern "C" fn open(
    _vfs: *mut ffi::sqlite3_vfs,
    name: *const c_char,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let platform = platform();
    // SAFETY: `platform` is the VFS `register` wrapped; `file` has room for a `WalFile` and the
    // platform's file after it (`szOsFile`), as SQLite allocated it for this VFS.
    unsafe {
        let Some(platform_open) = platform.as_ref().and_then(|vfs| vfs.xOpen) else { return ffi::SQLITE_ERROR };
        if flags & ffi::SQLITE_OPEN_WAL == 0 {
            return platform_open(platform, name, file, flags, out_flags);
        }
        (*file).pMethods = ptr::null();
        let inner = file.cast::<u8>().add(inner_offset()).cast::<ffi::sqlite3_file>();
        (*inner).pMethods = ptr::null();
        let opened = platform_open(platform, name, inner, flags, out_flags);
        if opened != ffi::SQLITE_OK {
            // SQLite would close a file whose open failed if it had methods; this one has none,
            // so the platform's file, if it has, is closed here.
            if let Some(close) = (*inner).pMethods.as_ref().and_then(|methods| methods.xClose) {
                close(inner);
            }
            return opened;
        }
        if (*inner).pMethods.is_null() {
            return ffi::SQLITE_CANTOPEN;
        }
        let wal = WalFile {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            inner,
            held: None,
            header: [0; FRAME_HEADER],
            joined: Vec::new(),
        };
        ptr::write(file.cast::<WalFile>(), wal);
        ffi::SQLITE_OK
    }
}

/// The wrapped file of `file`, its held header written first.
///
/// # Safety
/// `file` is a file `open` wrapped and has not been closed.
unsafe fn flushed<'a>(file: *mut ffi::sqlite3_file) -> Result<&'a mut WalFile, c_int> {
    // SAFETY: as the caller promises.
    let wal = unsafe { &mut *file.cast::<WalFile>() };
    if let Some(at) = wal.held.take() {
        let header = wal.header;
        // SAFETY: `wal.inner` is the platform's open file.
        let written = unsafe { write_inner(wal.inner, &header, at) };
        if written != ffi::SQLITE_OK {
            return Err(written);
        }
    }
    Ok(wal)
}

/// The platform's methods of its open file `inner`.
///
/// # Safety
/// `inner` is an open file of the platform's VFS.
unsafe fn methods<'a>(inner: *mut ffi::sqlite3_file) -> &'a ffi::sqlite3_io_methods {
    // SAFETY: an open file has its methods.
    unsafe { &*(*inner).pMethods }
}

/// # Safety
/// `inner` is an open file of the platform's VFS.
unsafe fn write_inner(inner: *mut ffi::sqlite3_file, bytes: &[u8], at: i64) -> c_int {
    let Ok(amount) = c_int::try_from(bytes.len()) else { return ffi::SQLITE_IOERR_WRITE };
    // SAFETY: as the caller promises; `bytes` is valid for its length.
    unsafe {
        match methods(inner).xWrite {
            Some(write) => write(inner, bytes.as_ptr().cast::<c_void>(), amount, at),
            None => ffi::SQLITE_IOERR_WRITE,
        }
    }
}

unsafe extern "C" fn write(file: *mut ffi::sqlite3_file, data: *const c_void, amount: c_int, at: i64) -> c_int {
    let Ok(length) = usize::try_from(amount) else { return ffi::SQLITE_IOERR_WRITE };
    // SAFETY: SQLite passes a file `open` wrapped and `amount` readable bytes at `data`.
    unsafe {
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), length);
        let wal = &mut *file.cast::<WalFile>();
        if let Some(held_at) = wal.held
            && held_at + FRAME_HEADER_SPAN == at
        {
            // The page of the held header: both in one call.
            wal.held = None;
            wal.joined.clear();
            wal.joined.extend_from_slice(&wal.header);
            wal.joined.extend_from_slice(bytes);
            return write_inner(wal.inner, &wal.joined, held_at);
        }
        let wal = match flushed(file) {
            Ok(wal) => wal,
            Err(code) => return code,
        };
        if length == FRAME_HEADER {
            wal.header.copy_from_slice(bytes);
            wal.held = Some(at);
            return ffi::SQLITE_OK;
        }
        write_inner(wal.inner, bytes, at)
    }
}

unsafe extern "C" fn close(file: *mut ffi::sqlite3_file) -> c_int {
    // SAFETY: SQLite closes a file `open` wrapped once; the `WalFile` is dropped in place here
    // and the memory is SQLite's to free.
    unsafe {
        let written = match flushed(file) {
            Ok(_) => ffi::SQLITE_OK,
            Err(code) => code,
        };
        let wal = file.cast::<WalFile>();
        let inner = (*wal).inner;
        let closed = methods(inner).xClose.map_or(ffi::SQLITE_OK, |close| close(inner));
        ptr::drop_in_place(wal);
        if written != ffi::SQLITE_OK { written } else { closed }
    }
}

/// Forwards a method to the platform's file once a held header is written: `$method` of the
/// platform's `sqlite3_io_methods`, with the wrapper's arguments after the file.
macro_rules! forward {
    ($name:ident, $method:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            // SAFETY: SQLite passes a file `open` wrapped, with the method's own arguments.
            unsafe {
                match flushed(file) {
                    Ok(wal) => match methods(wal.inner).$method {
                        Some(method) => method(wal.inner $(, $arg)*),
                        None => $missing,
                    },
                    Err(code) => code,
                }
            }
        }
    };
}

forward!(read, xRead, (data: *mut c_void, amount: c_int, at: i64), ffi::SQLITE_IOERR_READ);
forward!(truncate, xTruncate, (size: i64), ffi::SQLITE_IOERR_TRUNCATE);
forward!(sync, xSync, (flags: c_int), ffi::SQLITE_IOERR_FSYNC);
forward!(file_size, xFileSize, (size: *mut i64), ffi::SQLITE_IOERR_FSTAT);
forward!(lock, xLock, (level: c_int), ffi::SQLITE_OK);
forward!(unlock, xUnlock, (level: c_int), ffi::SQLITE_OK);
forward!(check_reserved_lock, xCheckReservedLock, (out: *mut c_int), ffi::SQLITE_OK);
forward!(file_control, xFileControl, (op: c_int, arg: *mut c_void), ffi::SQLITE_NOTFOUND);
forward!(sector_size, xSectorSize, (), 4096);
forward!(device_characteristics, xDeviceCharacteristics, (), 0);

/// Version 1: a WAL file is never memory-mapped or given a shared-memory index (those are the
/// database file's), so SQLite asks it for nothing of versions 2 and 3.
static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 1,
    xClose: Some(close),
    xRead: Some(read),
    xWrite: Some(write),
    xTruncate: Some(truncate),
    xSync: Some(sync),
    xFileSize: Some(file_size),
    xLock: Some(lock),
    xUnlock: Some(unlock),
    xCheckReservedLock: Some(check_reserved_lock),
    xFileControl: Some(file_control),
    xSectorSize: Some(sector_size),
    xDeviceCharacteristics: Some(device_characteristics),
    xShmMap: None,
    xShmLock: None,
    xShmBarrier: None,
    xShmUnmap: None,
    xFetch: None,
    xUnfetch: None,
};

#[cfg(test)]
mod tests {
    use diesel::connection::SimpleConnection;
    use diesel::prelude::*;
    use diesel::sql_types::BigInt;

    use super::*;

    #[derive(QueryableByName)]
    struct Count {
        #[diesel(sql_type = BigInt)]
        n: i64,
    }

    fn count(conn: &mut SqliteConnection) -> i64 {
        diesel::sql_query("SELECT COUNT(*) AS n FROM t").get_result::<Count>(conn).unwrap().n
    }

    fn is_default() -> bool {
        // SAFETY: the default VFS and its name live as long as the process.
        unsafe { std::ffi::CStr::from_ptr((*ffi::sqlite3_vfs_find(ptr::null())).zName).to_bytes_with_nul() == NAME }
    }

    /// What a crash leaves — the database file and its WAL, never checkpointed, no WAL index —
    /// reads back whole: every frame written through the VFS has its header, checksums and page
    /// where SQLite's recovery looks for them.
    #[test]
    fn frames_written_whole_are_recovered_from_the_wal() {
        assert!(install());
        assert!(is_default(), "the default VFS of every connection opened from now on");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        let mut conn = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
        conn.batch_execute(
            "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL; PRAGMA wal_autocheckpoint = 0;
             CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL);",
        )
        .unwrap();
        // Many commits of one and of several pages, some rewriting a page the same transaction
        // wrote before (a frame overwritten in place).
        for i in 0..200 {
            let body = "x".repeat(100 + (i * 37) % 9000);
            conn.batch_execute(&format!(
                "BEGIN; INSERT INTO t (body) VALUES ('{body}'); UPDATE t SET body = body || 'y' WHERE id = 1; COMMIT;"
            ))
            .unwrap();
        }
        assert_eq!(count(&mut conn), 200);
        let wal = dir.path().join("w.db-wal");
        assert!(std::fs::metadata(&wal).unwrap().len() > 200 * 4096, "the commits are in the WAL");
        let copy = tempfile::tempdir().unwrap();
        std::fs::copy(&path, copy.path().join("w.db")).unwrap();
        std::fs::copy(&wal, copy.path().join("w.db-wal")).unwrap();
        let mut recovered = SqliteConnection::establish(copy.path().join("w.db").to_str().unwrap()).unwrap();
        assert_eq!(count(&mut recovered), 200, "every commit recovered from the WAL");
        let first =
            diesel::sql_query("SELECT LENGTH(body) AS n FROM t WHERE id = 1").get_result::<Count>(&mut recovered);
        assert_eq!(first.unwrap().n, 100 + 200, "the page written last is the one read");
        // And a checkpoint through the VFS moves it all into the database file.
        conn.batch_execute("PRAGMA wal_checkpoint(TRUNCATE);").unwrap();
        drop(conn);
        let mut reopened = SqliteConnection::establish(path.to_str().unwrap()).unwrap();
        assert_eq!(count(&mut reopened), 200);
    }
}
