//! The two calls a torchft node makes to the Lighthouse, as they arrive: one gRPC message (a
//! flag byte, a 4-byte length, protobuf) of `LighthouseHeartbeatRequest { replica_id = 1 }` or
//! `LighthouseQuorumRequest { requester = 1: QuorumMember }` (torchft 0.2.0's
//! `proto/torchft.proto`). Only the fields the front judges are read; the bytes forwarded are
//! the ones received.

/// What a node said, as far as the front reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Said {
    Heartbeat {
        replica: String,
    },
    /// A request to join the next quorum: the replica, where its manager and its store listen
    /// (the others dial both when it is the source of a recovery), and the step it claims.
    Quorum {
        replica: String,
        address: String,
        store_address: String,
        step: i64,
    },
}

impl Said {
    pub fn replica(&self) -> &str {
        match self {
            Said::Heartbeat { replica } | Said::Quorum { replica, .. } => replica,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrpcError {
    #[error("not one uncompressed gRPC message")]
    Framing,
    #[error("not a protobuf message")]
    Protobuf,
    #[error("a string that is not UTF-8")]
    Utf8,
    #[error("no requester")]
    NoRequester,
}

/// Field numbers of torchft 0.2.0's messages.
const REPLICA_ID: u64 = 1;
const REQUESTER: u64 = 1;
const ADDRESS: u64 = 2;
const STORE_ADDRESS: u64 = 3;
const STEP: u64 = 4;

pub fn heartbeat(body: &[u8]) -> Result<Said, GrpcError> {
    let mut replica = String::new();
    for field in Fields(message(body)?) {
        if let (REPLICA_ID, Value::Bytes(b)) = field? {
            replica = text(b)?;
        }
    }
    Ok(Said::Heartbeat { replica })
}

pub fn quorum(body: &[u8]) -> Result<Said, GrpcError> {
    let mut member = None;
    for field in Fields(message(body)?) {
        if let (REQUESTER, Value::Bytes(b)) = field? {
            member = Some(b);
        }
    }
    let (mut replica, mut address, mut store_address, mut step) =
        (String::new(), String::new(), String::new(), 0);
    for field in Fields(member.ok_or(GrpcError::NoRequester)?) {
        match field? {
            (REPLICA_ID, Value::Bytes(b)) => replica = text(b)?,
            (ADDRESS, Value::Bytes(b)) => address = text(b)?,
            (STORE_ADDRESS, Value::Bytes(b)) => store_address = text(b)?,
            // int64: a negative step is its two's complement, ten bytes long.
            (STEP, Value::Varint(v)) => step = v as i64,
            _ => {}
        }
    }
    Ok(Said::Quorum {
        replica,
        address,
        store_address,
        step,
    })
}

/// The protobuf of a body holding exactly one uncompressed gRPC message.
fn message(body: &[u8]) -> Result<&[u8], GrpcError> {
    let (head, rest) = body.split_first_chunk::<5>().ok_or(GrpcError::Framing)?;
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    if head[0] != 0 || rest.len() != len {
        return Err(GrpcError::Framing);
    }
    Ok(rest)
}

fn text(bytes: &[u8]) -> Result<String, GrpcError> {
    String::from_utf8(bytes.to_vec()).map_err(|_| GrpcError::Utf8)
}

enum Value<'a> {
    Varint(u64),
    Bytes(&'a [u8]),
    Fixed,
}

/// A message's fields in order: (field number, value).
struct Fields<'a>(&'a [u8]);

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), GrpcError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.0.is_empty() {
            return None;
        }
        let field = self.field();
        if field.is_err() {
            self.0 = &[];
        }
        Some(field)
    }
}

impl<'a> Fields<'a> {
    fn field(&mut self) -> Result<(u64, Value<'a>), GrpcError> {
        let key = self.varint()?;
        let value = match key & 7 {
            0 => Value::Varint(self.varint()?),
            1 => self.skip(8)?,
            2 => {
                let len = usize::try_from(self.varint()?).map_err(|_| GrpcError::Protobuf)?;
                Value::Bytes(self.take(len)?)
            }
            5 => self.skip(4)?,
            _ => return Err(GrpcError::Protobuf),
        };
        Ok((key >> 3, value))
    }

    fn varint(&mut self) -> Result<u64, GrpcError> {
        let mut v = 0u64;
        for (i, &b) in self.0.iter().enumerate().take(10) {
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.0 = &self.0[i + 1..];
                return Ok(v);
            }
        }
        Err(GrpcError::Protobuf)
    }

    fn take(&mut self, len: usize) -> Result<&'a [u8], GrpcError> {
        if len > self.0.len() {
            return Err(GrpcError::Protobuf);
        }
        let (taken, rest) = self.0.split_at(len);
        self.0 = rest;
        Ok(taken)
    }

    fn skip(&mut self, len: usize) -> Result<Value<'a>, GrpcError> {
        self.take(len).map(|_| Value::Fixed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    fn bytes(field: u64, value: &[u8], out: &mut Vec<u8>) {
        varint(field << 3 | 2, out);
        varint(value.len() as u64, out);
        out.extend_from_slice(value);
    }

    fn framed(proto: &[u8]) -> Vec<u8> {
        let mut body = vec![0];
        body.extend_from_slice(&(proto.len() as u32).to_be_bytes());
        body.extend_from_slice(proto);
        body
    }

    /// A heartbeat as torchft's client encodes it.
    fn heartbeat_body(replica: &str) -> Vec<u8> {
        let mut proto = Vec::new();
        bytes(REPLICA_ID, replica.as_bytes(), &mut proto);
        framed(&proto)
    }

    /// A quorum request as torchft's client encodes it, with the fields it does not read.
    fn quorum_body(replica: &str, address: &str, store: &str, step: i64) -> Vec<u8> {
        let mut member = Vec::new();
        bytes(REPLICA_ID, replica.as_bytes(), &mut member);
        bytes(ADDRESS, address.as_bytes(), &mut member);
        bytes(STORE_ADDRESS, store.as_bytes(), &mut member);
        varint(STEP << 3, &mut member);
        varint(step as u64, &mut member);
        varint(5 << 3, &mut member); // world_size
        varint(1, &mut member);
        member.extend_from_slice(&[6 << 3 | 5, 1, 2, 3, 4]); // a fixed32 no field uses
        let mut proto = Vec::new();
        bytes(REQUESTER, &member, &mut proto);
        framed(&proto)
    }

    #[test]
    fn a_heartbeat_names_its_replica() {
        let said = heartbeat(&heartbeat_body("10.0.1.5#261:6f1c")).unwrap();
        assert_eq!(said.replica(), "10.0.1.5#261:6f1c");
    }

    #[test]
    fn a_quorum_request_names_its_replica_addresses_and_step() {
        let body = quorum_body(
            "10.0.1.5#261:6f1c",
            "http://10.0.1.5:40001",
            "10.0.1.5:29500",
            -3,
        );
        assert_eq!(
            quorum(&body).unwrap(),
            Said::Quorum {
                replica: "10.0.1.5#261:6f1c".into(),
                address: "http://10.0.1.5:40001".into(),
                store_address: "10.0.1.5:29500".into(),
                step: -3,
            }
        );
    }

    #[test]
    fn anything_else_is_refused_without_reading_past_the_body() {
        let good = heartbeat_body("a");
        let mut compressed = good.clone();
        compressed[0] = 1;
        let mut long = good.clone();
        long.push(0);
        let cut = &good[..good.len() - 1];
        let endless = framed(&[0x80; 11]);
        for bad in [
            &compressed[..],
            &long,
            cut,
            &[0, 0],
            &endless,
            &framed(&[0x0f]),
        ] {
            assert!(heartbeat(bad).is_err(), "{bad:?}");
        }
        assert_eq!(quorum(&framed(&[])), Err(GrpcError::NoRequester));
        let mut not_utf8 = Vec::new();
        bytes(REPLICA_ID, &[0xff, 0xfe], &mut not_utf8);
        assert_eq!(heartbeat(&framed(&not_utf8)), Err(GrpcError::Utf8));
    }
}
