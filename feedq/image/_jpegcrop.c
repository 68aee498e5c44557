/* feedq.image._jpegcrop: decode only a window of a JPEG (libjpeg-turbo), GIL released.
 *
 * decode_crop(data, y, x, h, w, scale_denom, fast_dct, fancy, out[, pixel_size[,
 * check_tail]]) decodes the window [y, y + h) x [x, x + w) of the image
 * scaled by 1/scale_denom (in the DCT domain) into `out` as RGBX (pixel_size
 * 4, the default) or RGB (pixel_size 3), rows of w pixels. Rows above the
 * window are skipped (entropy-decoded only: jpeg_skip_scanlines) and columns
 * outside it are not inverse-transformed (jpeg_crop_scanline). With
 * check_tail (the default) the rows below are skipped the same way and
 * jpeg_finish_decompress reads to the end, so a file damaged below the
 * window is refused as the twin's full decode refuses it; with check_tail=0
 * decoding stops after the window's last row, as TF's decode_and_crop_jpeg
 * does (less work; damage below the window goes unnoticed). To give the
 * same pixels as a full decode, the window is widened by a margin of 16
 * decoded pixels on every side (clipped to the image) before cropping, so
 * that chroma upsampling at its edges sees the same neighbours.
 *
 * Warnings are errors (a truncated or corrupt image fails instead of decoding
 * grey rows), as simplejpeg's strict mode. Returns None; raises ValueError
 * with libjpeg's message.
 *
 * The pure-Python twin is feedq/image/_cropdecode.py (a full decode through
 * simplejpeg, then the window): the differential tests compare the two.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdio.h>
#include <setjmp.h>
#include <string.h>
#include <jpeglib.h>

#define MARGIN 16

typedef struct {
    struct jpeg_error_mgr pub;
    jmp_buf jump;
    char message[JMSG_LENGTH_MAX];
} err_mgr;

static void on_error(j_common_ptr cinfo) {
    err_mgr *err = (err_mgr *)cinfo->err;
    (*cinfo->err->format_message)(cinfo, err->message);
    longjmp(err->jump, 1);
}

static void on_message(j_common_ptr cinfo, int level) {
    if (level < 0) { /* a warning: corrupt data libjpeg would paper over */
        on_error(cinfo);
    }
}

static PyObject *py_decode_crop(PyObject *self, PyObject *args) {
    Py_buffer data, out;
    int y, x, h, w, denom, fast_dct, fancy, ps = 4, check_tail = 1;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*iiiiiiiw*|ip", &data, &y, &x, &h, &w, &denom, &fast_dct, &fancy,
                          &out, &ps, &check_tail)) {
        return NULL;
    }
    if (h <= 0 || w <= 0 || y < 0 || x < 0 || (denom != 1 && denom != 2 && denom != 4 && denom != 8)
        || (ps != 3 && ps != 4)) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "bad window, scale or pixel size");
        return NULL;
    }
    if (out.len < (Py_ssize_t)h * w * ps) {
        PyBuffer_Release(&data);
        PyBuffer_Release(&out);
        PyErr_SetString(PyExc_ValueError, "output buffer too small");
        return NULL;
    }
    struct jpeg_decompress_struct cinfo;
    err_mgr err;
    memset(&cinfo, 0, sizeof(cinfo));
    err.message[0] = 0;
    unsigned char *volatile row = NULL;
    volatile int failed = 0;
    const char *volatile why = NULL;
    unsigned char *dst = (unsigned char *)out.buf;

    Py_BEGIN_ALLOW_THREADS
    cinfo.err = jpeg_std_error(&err.pub);
    err.pub.error_exit = on_error;
    err.pub.emit_message = on_message;
    if (setjmp(err.jump)) {
        failed = 1;
    } else {
        jpeg_create_decompress(&cinfo);
        jpeg_mem_src(&cinfo, (const unsigned char *)data.buf, (unsigned long)data.len);
        jpeg_read_header(&cinfo, TRUE);
        if (cinfo.jpeg_color_space == JCS_CMYK || cinfo.jpeg_color_space == JCS_YCCK) {
            why = "CMYK JPEG: no cropped decode";
        } else {
            cinfo.out_color_space = ps == 3 ? JCS_EXT_RGB : JCS_EXT_RGBX;
            cinfo.scale_num = 1;
            cinfo.scale_denom = (unsigned int)denom;
            cinfo.dct_method = fast_dct ? JDCT_IFAST : JDCT_ISLOW;
            cinfo.do_fancy_upsampling = fancy ? TRUE : FALSE;
            jpeg_calc_output_dimensions(&cinfo);
            int W = (int)cinfo.output_width, H = (int)cinfo.output_height;
            if (y + h > H || x + w > W) {
                why = "window outside the image";
            } else {
                jpeg_start_decompress(&cinfo);
                /* the widened window, then libjpeg's iMCU-aligned crop of it */
                int wx0 = x > MARGIN ? x - MARGIN : 0;
                int wx1 = x + w + MARGIN < W ? x + w + MARGIN : W;
                JDIMENSION cx = (JDIMENSION)wx0, cw = (JDIMENSION)(wx1 - wx0);
                jpeg_crop_scanline(&cinfo, &cx, &cw);
                int skip_cols = x - (int)cx;
                int wy0 = y > MARGIN ? y - MARGIN : 0;
                if (wy0 > 0) {
                    jpeg_skip_scanlines(&cinfo, (JDIMENSION)wy0);
                }
                row = (unsigned char *)malloc((size_t)cw * ps);
                if (row == NULL) {
                    why = "out of memory";
                } else {
                    while ((int)cinfo.output_scanline < y + h) {
                        int line = (int)cinfo.output_scanline;
                        JSAMPROW rows[1] = {row};
                        if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
                            why = "premature end of data";
                            break;
                        }
                        if (line >= y) {
                            memcpy(dst + (size_t)(line - y) * w * ps, row + (size_t)skip_cols * ps,
                                   (size_t)w * ps);
                        }
                    }
                    if (why == NULL && check_tail) {
                        /* The rows below, entropy-decoded only, and the end of the
                         * data: damage anywhere in the file fails (warnings are errors). */
                        /* (Skipping to the very end would only mark the input read:
                         * skip to the last row and read it.) */
                        if ((int)cinfo.output_scanline < H - 1) {
                            jpeg_skip_scanlines(&cinfo, (JDIMENSION)(H - 1 - (int)cinfo.output_scanline));
                        }
                        while ((int)cinfo.output_scanline < H) {
                            JSAMPROW rows[1] = {row};
                            if (jpeg_read_scanlines(&cinfo, rows, 1) != 1) {
                                why = "premature end of data";
                                break;
                            }
                        }
                        if (why == NULL) {
                            jpeg_finish_decompress(&cinfo);
                        }
                    }
                }
            }
        }
    }
    free(row);
    jpeg_destroy_decompress(&cinfo); /* also after an error; frees what was allocated */
    Py_END_ALLOW_THREADS

    PyBuffer_Release(&data);
    PyBuffer_Release(&out);
    if (failed) {
        PyErr_Format(PyExc_ValueError, "%s", err.message[0] ? err.message : "JPEG error");
        return NULL;
    }
    if (why != NULL) {
        PyErr_SetString(PyExc_ValueError, why);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"decode_crop", py_decode_crop, METH_VARARGS,
     "decode_crop(data, y, x, h, w, scale_denom, fast_dct, fancy, out[, pixel_size[, check_tail]]): a JPEG window as RGBX (4) or RGB (3)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_jpegcrop", "Cropped JPEG decoding (libjpeg-turbo).", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__jpegcrop(void) {
    PyObject *m = PyModule_Create(&module);
#ifdef LIBJPEG_TURBO_VERSION_NUMBER
    if (m != NULL && PyModule_AddIntConstant(m, "LIBJPEG_TURBO_VERSION_NUMBER",
                                             LIBJPEG_TURBO_VERSION_NUMBER) < 0) {
        Py_DECREF(m);
        return NULL;
    }
#endif
    return m;
}
