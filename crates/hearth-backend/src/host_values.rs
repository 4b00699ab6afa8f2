//! f32 results a backend reads back to the host, held where that backend copies them fastest.

use std::ops::{Deref, DerefMut};

/// Host memory a backend allocated for its device to copy into directly (page-locked memory
/// for a CUDA GPU), owned by a [`HostValues`] and freed with it.
///
/// # Safety
/// `as_mut_ptr` must point to `capacity()` f32 values, initialized (any bits), valid and not
/// aliased elsewhere for as long as the object lives; `as_ptr` the same memory.
pub unsafe trait DeviceVisible: Send {
    /// Room, in f32 values.
    fn capacity(&self) -> usize;
    fn as_ptr(&self) -> *const f32;
    fn as_mut_ptr(&mut self) -> *mut f32;
}

/// f32 values read back from a backend: in a vector, or in memory the backend's device copies
/// into without a bounce through memory of its own (see [`DeviceVisible`]).
///
/// NOTE: a device copies into ordinary (pageable) memory through page-locked memory of its
/// driver, one piece after the other: one sequence's logits of a 152k vocabulary (600 KB)
/// came back at about 9 GB/s on an H100 machine, some 60 µs of a 1 ms decode step. Kept by
/// the engine from step to step, the device-visible memory is allocated once.
#[derive(Default)]
pub struct HostValues {
    vec: Vec<f32>,
    visible: Option<Box<dyn DeviceVisible>>,
    /// Values held in `visible`; `None` while the values are the vector's.
    visible_len: Option<usize>,
}

impl HostValues {
    pub fn new() -> Self {
        Self::default()
    }

    /// Empties it; allocations are kept.
    pub fn clear(&mut self) {
        self.vec.clear();
        self.visible_len = None;
    }

    /// The values as a vector for a backend to fill (replacing what it held).
    pub fn vec_mut(&mut self) -> &mut Vec<f32> {
        self.visible_len = None;
        &mut self.vec
    }

    /// `len` values in device-visible memory for a backend to fill, made by `make(len)` where
    /// there is none or it is too small. Their contents are unspecified until then.
    pub fn device_visible<E>(
        &mut self,
        len: usize,
        make: impl FnOnce(usize) -> Result<Box<dyn DeviceVisible>, E>,
    ) -> Result<&mut [f32], E> {
        self.clear();
        let memory = match self.visible.take() {
            Some(m) if m.capacity() >= len => m,
            _ => make(len)?,
        };
        assert!(
            memory.capacity() >= len,
            "device-visible memory smaller than asked for"
        );
        self.visible_len = Some(len);
        let memory = self.visible.insert(memory);
        // SAFETY: DeviceVisible's contract: capacity() >= len initialized f32 owned by it.
        Ok(unsafe { std::slice::from_raw_parts_mut(memory.as_mut_ptr(), len) })
    }

    /// The values in a vector of their own.
    pub fn into_vec(self) -> Vec<f32> {
        match self.visible_len {
            None => self.vec,
            Some(_) => self.to_vec(),
        }
    }
}

impl Deref for HostValues {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match (self.visible_len, &self.visible) {
            // SAFETY: device_visible set the length within the memory's capacity.
            (Some(len), Some(m)) => unsafe { std::slice::from_raw_parts(m.as_ptr(), len) },
            _ => &self.vec,
        }
    }
}

impl DerefMut for HostValues {
    fn deref_mut(&mut self) -> &mut [f32] {
        match (self.visible_len, &mut self.visible) {
            // SAFETY: as in deref, and &mut self makes the access exclusive.
            (Some(len), Some(m)) => unsafe { std::slice::from_raw_parts_mut(m.as_mut_ptr(), len) },
            _ => &mut self.vec,
        }
    }
}

impl std::fmt::Debug for HostValues {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostValues")
            .field("len", &self.len())
            .field("device_visible", &self.visible_len.is_some())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Device-visible memory stood in for by a boxed slice (what the trait asks of it).
    struct Boxed(Box<[f32]>);

    // SAFETY: the boxed slice is owned, initialized and as long as capacity() says.
    unsafe impl DeviceVisible for Boxed {
        fn capacity(&self) -> usize {
            self.0.len()
        }
        fn as_ptr(&self) -> *const f32 {
            self.0.as_ptr()
        }
        fn as_mut_ptr(&mut self) -> *mut f32 {
            self.0.as_mut_ptr()
        }
    }

    fn boxed(n: usize) -> Result<Box<dyn DeviceVisible>, ()> {
        Ok(Box::new(Boxed(vec![0.0; n].into_boxed_slice())))
    }

    #[test]
    fn values_come_from_where_they_were_last_written() {
        let mut v = HostValues::new();
        assert!(v.is_empty());
        v.vec_mut().extend([1.0, 2.0]);
        assert_eq!(&v[..], &[1.0, 2.0]);
        v.device_visible(3, boxed)
            .unwrap()
            .copy_from_slice(&[3.0, 4.0, 5.0]);
        assert_eq!(&v[..], &[3.0, 4.0, 5.0]);
        v[0] = 6.0;
        // Smaller: the same memory, no new one made.
        let again = v.device_visible(2, |_| Err(())).unwrap();
        assert_eq!(again, &[6.0, 4.0]);
        // Larger: a new one.
        v.device_visible(8, boxed).unwrap()[7] = 9.0;
        assert_eq!(v.len(), 8);
        assert_eq!(v.to_vec(), [0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 9.0]);
        v.vec_mut().push(1.5);
        assert_eq!(&v[..], &[1.5]);
        v.clear();
        assert!(v.is_empty());
        v.device_visible(1, boxed).unwrap()[0] = 2.5;
        assert_eq!(v.into_vec(), vec![2.5]);
    }

    #[test]
    fn a_failed_allocation_leaves_it_empty() {
        let mut v = HostValues::new();
        v.vec_mut().push(1.0);
        assert!(v.device_visible(4, |_| Err("no memory")).is_err());
        assert!(v.is_empty());
    }
}
